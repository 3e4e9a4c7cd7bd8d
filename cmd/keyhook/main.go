// Command keyhook turns Kafka topics into webhooks.
//
//	keyhook serve    run the REST API and a dispatcher node
//	keyhook dev      the same, with Kafka, Redis, an endpoint and a producer embedded
//	keyhook subscriptions ...  manage subscriptions through the API
//	keyhook token ...          create, list and revoke API tokens
//	keyhook version  print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errors.New("keyhook: a command is required")
	}
	switch args[0] {
	case "serve":
		c, err := parseConfig("serve", args[1:], getenv, stderr, true)
		if err != nil {
			return err
		}
		return serve(ctx, c, stderr)
	case "dev":
		c, err := parseConfig("dev", args[1:], getenv, stderr, false)
		if err != nil {
			return err
		}
		return dev(ctx, c, stdout, stderr)
	case "subscriptions", "subs":
		return subscriptionsCmd(ctx, args[1:], getenv, stdout, stderr)
	case "token":
		return tokenCmd(ctx, args[1:], getenv, stdout, stderr)
	case "console":
		return consoleCmd(ctx, args[1:], getenv, stdout, stderr, nil)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "keyhook", version)
		return nil
	case "help", "--help", "-h":
		usage(stdout)
		return nil
	default:
		usage(stderr)
		return fmt.Errorf("keyhook: unknown command %q", args[0])
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `keyhook turns Kafka topics into webhooks.

Commands:
  serve          run the REST API and a dispatcher node against Kafka and Redis
  dev            run everything embedded (Kafka, Redis, a demo endpoint and producer)
  subscriptions  manage subscriptions through the API: list, create, get, delete,
                 pause, resume, seek, status (--api-url, --token)
  token          create, list or revoke API tokens, in Redis (--redis-url)
  console        print (--open: open) the operator console's address, logged in
  version        print the version

Run "keyhook serve -h" for the flags; each has a KEYHOOK_* environment twin.
`)
}
