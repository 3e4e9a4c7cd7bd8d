package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/configlog"
	"github.com/keyhook/keyhook/connect"
)

const tokenUsage = `Usage: keyhook token <command> [flags]

Commands:
  create --name NAME --scopes SCOPES   make a token and print it (once)
  list                                 list tokens (never their values)
  revoke NAME                          revoke a token at once

Scopes: subscriptions:read, subscriptions:write, admin (implies both).
Tokens live in Redis: every command takes --redis-url (KEYHOOK_REDIS_URL)
and the other --redis-* connection flags of keyhook serve. Every change is
recorded first in the config topic, from which nodes rebuild a Redis that
lost it: create and revoke also take --kafka-brokers (KEYHOOK_KAFKA_BROKERS),
--config-topic and the other --kafka-* flags of keyhook serve.
`

// tokenCmd runs "keyhook token ...", working on Redis directly: tokens
// exist before any API call can be authenticated.
func tokenCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, tokenUsage)
		if len(args) == 0 {
			return fmt.Errorf("keyhook token: a command is required")
		}
		return nil
	}
	verb, args := args[0], args[1:]
	cmd := "token " + verb
	fs := flag.NewFlagSet("keyhook "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rc connect.RedisConfig
	redisParsed := addRedisFlags(fs, &rc)
	var kc connect.KafkaConfig
	var configTopic string
	brokers := fs.String("kafka-brokers", "", "comma-separated Kafka seed brokers (host:port); required by create and revoke")
	addKafkaFlags(fs, &kc, &configTopic)
	output := fs.String("o", "table", "output: table or json")
	var name, scopes string
	switch verb {
	case "create":
		fs.StringVar(&name, "name", "", "token name: 1-64 of [A-Za-z0-9._-], unique")
		fs.StringVar(&scopes, "scopes", "", "comma-separated scopes: subscriptions:read, subscriptions:write, metrics, admin")
	case "list", "revoke":
	default:
		fmt.Fprint(stderr, tokenUsage)
		return fmt.Errorf("keyhook token: unknown command %q", verb)
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := applyEnv(fs, getenv, cmd); err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("keyhook %s: -o %q: want table or json", cmd, *output)
	}
	wantArgs := 0
	if verb == "revoke" {
		wantArgs = 1
	}
	if len(pos) != wantArgs {
		return fmt.Errorf("keyhook %s: want %d arguments, got %d", cmd, wantArgs, len(pos))
	}
	redisParsed()
	if rc.URL == "" {
		return flagError(cmd, "redis-url", "is required")
	}
	rdb, err := connect.NewRedis(rc)
	if err != nil {
		return connectError(cmd, err, redisFlags)
	}
	defer rdb.Close()
	var cfgLog *configlog.Log
	if verb != "list" {
		if cfgLog, err = openConfigLog(ctx, cmd, splitList(*brokers), kc, configTopic); err != nil {
			return err
		}
		defer cfgLog.Close()
	}
	acfg := auth.Config{}
	if cfgLog != nil {
		acfg.Log = cfgLog
	}
	store, err := auth.New(rdb, acfg)
	if err != nil {
		return fmt.Errorf("keyhook %s: %w", cmd, err)
	}

	switch verb {
	case "create":
		sc, err := auth.ParseScopes(scopes)
		if err != nil {
			return flagError(cmd, "scopes", strings.TrimPrefix(err.Error(), "auth: "))
		}
		secret, tok, err := store.Create(ctx, name, sc)
		if err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		if *output == "json" {
			return writeJSONTo(stdout, struct {
				Secret string `json:"token"`
				auth.Token
			}{secret, tok})
		}
		fmt.Fprintln(stdout, secret)
		fmt.Fprintf(stderr, "token %q (%s) created; it is shown only now: store it\n", tok.Name, joinScopes(tok.Scopes))
		return nil
	case "list":
		list, err := store.List(ctx)
		if err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		if *output == "json" {
			return writeJSONTo(stdout, list)
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "NAME\tSCOPES\tCREATED\tLAST USED")
		for _, t := range list {
			used := "never"
			if t.LastUsed != nil {
				used = t.LastUsed.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, joinScopes(t.Scopes), t.CreatedAt.Format(time.RFC3339), used)
		}
		return tw.Flush()
	default: // revoke
		if err := store.Revoke(ctx, pos[0]); err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		fmt.Fprintf(stdout, "revoked %s\n", pos[0])
		return nil
	}
}

// openConfigLog connects the config topic that token changes are
// recorded in, creating it when missing (a first token may come before
// the first node).
func openConfigLog(ctx context.Context, cmd string, brokers []string, kc connect.KafkaConfig, topic string) (*configlog.Log, error) {
	if len(brokers) == 0 {
		return nil, flagError(cmd, "kafka-brokers", "is required: token changes are recorded in the config topic")
	}
	if err := kc.Validate(); err != nil {
		return nil, connectError(cmd, err, kafkaFlags)
	}
	opts, err := connect.KafkaOptions(kc)
	if err != nil {
		return nil, connectError(cmd, err, kafkaFlags)
	}
	l, err := configlog.New(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...), configlog.Config{Topic: topic})
	if err != nil {
		return nil, flagError(cmd, "config-topic", strings.TrimPrefix(err.Error(), "configlog: config: "))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := l.EnsureTopic(ctx); err != nil {
		l.Close()
		if errors.Is(err, configlog.ErrTopicUnfit) {
			return nil, flagError(cmd, "config-topic", err.Error())
		}
		return nil, fmt.Errorf("keyhook %s: %w", cmd, err)
	}
	return l, nil
}

func joinScopes(s []auth.Scope) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = string(v)
	}
	return strings.Join(parts, ",")
}

func writeJSONTo(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return printJSON(w, data)
}

// applyEnv fills every flag not given on the command line from its
// KEYHOOK_* variable, as parseConfig does for serve.
func applyEnv(fs *flag.FlagSet, getenv func(string) string, cmd string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil || f.Name == "o" {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("keyhook %s: %s=%q: invalid value for --%s: %v", cmd, envName(f.Name), v, f.Name, serr)
			}
		}
	})
	return err
}
