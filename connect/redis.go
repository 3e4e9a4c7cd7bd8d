package connect

import (
	"errors"
	"net"
	"net/url"

	"github.com/redis/go-redis/v9"
)

// RedisConfig says how keyhook reaches Redis. URL is required; the other
// fields are optional.
//
// Three topologies are supported: a single server (the URL's host), a
// primary found through Sentinel (SentinelMaster), and Redis Cluster
// (Cluster). In every one the URL gives the credentials (user:password for
// an ACL user, or :password), TLS (the rediss:// scheme) and the go-redis
// query options (dial_timeout, pool_size, …); Addrs, when set, replaces its
// host as the list of servers to dial first.
type RedisConfig struct {
	// URL is redis://[user:password@]host:port[/db][?options], rediss:// for
	// TLS, or unix:///path/to/socket for a single server. Required.
	URL string
	// TLSCAFile is a PEM file of the certificate authorities that sign the
	// servers' certificates; it replaces the system roots. Requires a
	// rediss:// URL.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the PEM client certificate and its key,
	// for servers started with tls-auth-clients yes. Both or neither;
	// they require a rediss:// URL.
	TLSCertFile string
	TLSKeyFile  string
	// SentinelMaster is the name of the primary that the Sentinels watch;
	// Addrs (or else the URL's host) are the Sentinels. The URL's
	// credentials authenticate to the primary and replicas only: the
	// Sentinels are reached without authentication.
	SentinelMaster string
	// Cluster talks to a Redis Cluster; Addrs (or else the URL's host) are
	// the seed nodes the slot map is learned from. The URL must select
	// database 0, the only one a cluster has. TLS certificates are verified
	// against the URL's host name for every node.
	Cluster bool
	// Addrs are host:port addresses of the Sentinels or of the cluster's
	// seed nodes. They replace the URL's host and are only meaningful with
	// SentinelMaster or Cluster.
	Addrs []string
}

// Validate reports the first inconsistent field of c without touching any
// file or server. The error is a *FieldError.
func (c RedisConfig) Validate() error {
	_, err := c.parse()
	return err
}

// parse validates c and returns the options of its URL.
func (c RedisConfig) parse() (*redis.Options, error) {
	if c.URL == "" {
		return nil, fieldErr("URL", "is required")
	}
	o, err := redis.ParseURL(c.URL)
	if err != nil {
		// url.Error repeats the whole URL, password included; the
		// underlying error says what is wrong without it.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fieldErr("URL", "is not a valid Redis URL: %v", err)
	}
	if o.TLSConfig == nil {
		for _, f := range []struct{ name, value string }{
			{"TLSCAFile", c.TLSCAFile}, {"TLSCertFile", c.TLSCertFile}, {"TLSKeyFile", c.TLSKeyFile},
		} {
			if f.value != "" {
				return nil, fieldErr(f.name, "requires a rediss:// URL")
			}
		}
	}
	if err := c.tlsFiles().check(); err != nil {
		return nil, err
	}
	switch {
	case c.Cluster && c.SentinelMaster != "":
		return nil, fieldErr("Cluster", "is set together with a Sentinel master; a deployment is either a cluster or Sentinel-managed")
	case len(c.Addrs) > 0 && !c.Cluster && c.SentinelMaster == "":
		return nil, fieldErr("Addrs", "is only used for a cluster or Sentinels; a single server is the URL's host")
	case (c.Cluster || c.SentinelMaster != "") && o.Network == "unix":
		return nil, fieldErr("URL", "is a unix socket, which reaches one server, not a cluster or Sentinels")
	case c.Cluster && o.DB != 0:
		return nil, fieldErr("URL", "selects database %d; Redis Cluster has only database 0", o.DB)
	}
	for _, a := range c.Addrs {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			return nil, fieldErr("Addrs", "has %q, want host:port", a)
		}
	}
	return o, nil
}

func (c RedisConfig) tlsFiles() tlsFiles {
	return tlsFiles{
		caFile: c.TLSCAFile, certFile: c.TLSCertFile, keyFile: c.TLSKeyFile,
		caField: "TLSCAFile", certField: "TLSCertFile", keyField: "TLSKeyFile",
	}
}

// NewRedis returns the client c describes: a *redis.Client for a single
// server, a failover *redis.Client for SentinelMaster, a
// *redis.ClusterClient for Cluster. It validates c and loads the TLS files;
// errors are *FieldError. It does not dial: the first command does. The
// caller closes the client.
func NewRedis(c RedisConfig) (redis.UniversalClient, error) {
	o, err := c.parse()
	if err != nil {
		return nil, err
	}
	// Every keyhook call carries the deadline it can afford (a flush round,
	// a handover); without this go-redis waits out its own read, write and
	// dial timeouts instead, whatever the context says.
	o.ContextTimeoutEnabled = true
	if o.TLSConfig != nil {
		if err := c.tlsFiles().apply(o.TLSConfig); err != nil {
			return nil, err
		}
	}
	if !c.Cluster && c.SentinelMaster == "" {
		return redis.NewClient(o), nil
	}
	u := universal(o)
	if len(c.Addrs) > 0 {
		u.Addrs = append([]string(nil), c.Addrs...)
	}
	if c.Cluster {
		return redis.NewClusterClient(u.Cluster()), nil
	}
	u.MasterName = c.SentinelMaster
	return redis.NewFailoverClient(u.Failover()), nil
}

// universal carries every setting a URL can make over to the options from
// which go-redis derives its cluster and failover options, so that the
// query options of the URL hold in every topology.
func universal(o *redis.Options) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                   []string{o.Addr},
		ClientName:              o.ClientName,
		DB:                      o.DB,
		Protocol:                o.Protocol,
		Username:                o.Username,
		Password:                o.Password,
		MaxRetries:              o.MaxRetries,
		MinRetryBackoff:         o.MinRetryBackoff,
		MaxRetryBackoff:         o.MaxRetryBackoff,
		DialTimeout:             o.DialTimeout,
		ReadTimeout:             o.ReadTimeout,
		WriteTimeout:            o.WriteTimeout,
		PoolFIFO:                o.PoolFIFO,
		PoolSize:                o.PoolSize,
		PoolTimeout:             o.PoolTimeout,
		MinIdleConns:            o.MinIdleConns,
		MaxIdleConns:            o.MaxIdleConns,
		MaxActiveConns:          o.MaxActiveConns,
		MaxConcurrentDials:      o.MaxConcurrentDials,
		PipelinePoolSize:        o.PipelinePoolSize,
		PipelineReadBufferSize:  o.PipelineReadBufferSize,
		PipelineWriteBufferSize: o.PipelineWriteBufferSize,
		ConnMaxIdleTime:         o.ConnMaxIdleTime,
		ConnMaxLifetime:         o.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   o.ConnMaxLifetimeJitter,
		TLSConfig:               o.TLSConfig,
		ContextTimeoutEnabled:   o.ContextTimeoutEnabled,
	}
}
