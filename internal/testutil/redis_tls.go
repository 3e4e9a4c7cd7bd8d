package testutil

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TLSFiles is a throwaway PKI written as PEM files: a CA, a server
// certificate it signed and a client certificate it signed (for mutual
// TLS). Files live in the test's temporary directory.
type TLSFiles struct {
	CAFile         string
	ServerCertFile string
	ServerKeyFile  string
	ClientCertFile string
	ClientKeyFile  string
	// CAPool holds the CA, for clients and servers built in the test.
	CAPool *x509.CertPool

	server tls.Certificate
}

// ServerConfig returns a TLS configuration serving the server certificate,
// for in-process servers such as kfake. With requireClientCert the server
// refuses clients without a certificate signed by the CA.
func (f *TLSFiles) ServerConfig(requireClientCert bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{f.server}, MinVersion: tls.VersionTLS12}
	if requireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = f.CAPool
	}
	return cfg
}

// GenerateTLS writes a new CA, a server certificate and a client
// certificate. The server certificate names serverNames (IP addresses or
// DNS names); by default 127.0.0.1 and localhost, the only addresses tests
// connect to.
func GenerateTLS(t testing.TB, serverNames ...string) *TLSFiles {
	t.Helper()
	if len(serverNames) == 0 {
		serverNames = []string{"127.0.0.1", "localhost"}
	}
	dir := t.TempDir()
	now := time.Now()
	caKey := newTLSKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "keyhook test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testutil: create CA: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("testutil: parse CA: %v", err)
	}
	f := &TLSFiles{CAFile: filepath.Join(dir, "ca.crt"), CAPool: x509.NewCertPool()}
	f.CAPool.AddCert(ca)
	writePEM(t, f.CAFile, "CERTIFICATE", caDER)

	issue := func(serial int64, name string, usage x509.ExtKeyUsage, names []string) (certFile, keyFile string, pair tls.Certificate) {
		key := newTLSKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("testutil: create %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatalf("testutil: marshal %s key: %v", name, err)
		}
		certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		pair, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatalf("testutil: load %s key pair: %v", name, err)
		}
		return certFile, keyFile, pair
	}
	f.ServerCertFile, f.ServerKeyFile, f.server = issue(2, "server", x509.ExtKeyUsageServerAuth, serverNames)
	f.ClientCertFile, f.ClientKeyFile, _ = issue(3, "client", x509.ExtKeyUsageClientAuth, nil)
	return f
}

func newTLSKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testutil: generate key: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testutil: write %s: %v", path, err)
	}
}

// RedisTLS is a real redis-server that accepts only TLS connections, owned
// by one test.
type RedisTLS struct {
	// Addr is the TLS port's loopback address.
	Addr string
	// Files are the certificates the server was started with.
	Files *TLSFiles
}

// URL returns the rediss:// URL of the server, database 0.
func (r *RedisTLS) URL() string { return "rediss://" + r.Addr + "/0" }

// StartRedisTLS starts redis-server with TLS only (no plaintext port) on a
// free loopback port, serving files' server certificate, and stops it when
// the test ends. With requireClientCert the server refuses clients without
// a certificate signed by files' CA (tls-auth-clients yes).
func StartRedisTLS(t testing.TB, files *TLSFiles, requireClientCert bool) *RedisTLS {
	t.Helper()
	auth := "no"
	if requireClientCert {
		auth = "yes"
	}
	addr := startRedisServer(t, func(port int) []string {
		return []string{
			"--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", files.ServerCertFile, "--tls-key-file", files.ServerKeyFile,
			"--tls-ca-cert-file", files.CAFile, "--tls-auth-clients", auth,
		}
	})
	return &RedisTLS{Addr: addr, Files: files}
}

// startRedisServer runs redis-server on a free loopback port with
// persistence off, with the arguments args returns for that port, and
// kills it when the test ends. It returns the address once the port
// accepts connections, trying other ports if one was taken meanwhile.
func startRedisServer(t testing.TB, args func(port int) []string) string {
	t.Helper()
	return startRedisServerConf(t, "", args)
}

// startRedisServerConf is startRedisServer with a configuration file, which
// redis-server only takes as its first argument; "" means none.
func startRedisServerConf(t testing.TB, conf string, args func(port int) []string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found in PATH (install it: apt-get install -y redis-server): %v", err)
	}
	dir := t.TempDir()
	for try := 0; try < 5; try++ {
		port := FreePort(t)
		var argv []string
		if conf != "" {
			argv = append(argv, conf)
		}
		argv = append(argv, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--protected-mode", "no")
		cmd := exec.Command(bin, append(argv, args(port)...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatalf("testutil: start redis-server: %v", err)
		}
		drained := make(chan struct{})
		go func() { // drain so the server never blocks on a full pipe
			defer close(drained)
			s := bufio.NewScanner(out)
			for s.Scan() {
			}
		}()
		stop := func() {
			_ = cmd.Process.Kill()
			<-drained
			_ = cmd.Wait()
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if waitDial(addr, 5*time.Second) {
			t.Cleanup(stop)
			return addr
		}
		stop()
	}
	t.Fatalf("testutil: redis-server did not start")
	return ""
}
