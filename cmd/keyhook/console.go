package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"strings"
	"time"
)

const consoleUsage = `Usage: keyhook console [--open] [--api-url URL]

Prints the address of the operator console of a keyhook API, logged in
with KEYHOOK_TOKEN: <api-url>/console/#token=<token>. The token travels in
the URL fragment, which the browser never sends to the server; the console
keeps it in the tab's sessionStorage and removes it from the address bar.
--open also opens it with xdg-open.

`

// consoleCmd runs "keyhook console": the console's address, logged in.
// opener opens a URL in a browser; nil means xdg-open.
func consoleCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, opener func(ctx context.Context, u string) error) error {
	fs := flag.NewFlagSet("keyhook console", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, consoleUsage)
		fs.PrintDefaults()
	}
	apiURL := getenv("KEYHOOK_API_URL")
	if apiURL == "" {
		apiURL = defaultAPIURL
	}
	fs.StringVar(&apiURL, "api-url", apiURL, "keyhook API base URL (KEYHOOK_API_URL)")
	token := fs.String("token", getenv("KEYHOOK_TOKEN"), "API token (KEYHOOK_TOKEN; prefer the variable, which stays out of the process list)")
	open := fs.Bool("open", false, "open the address with xdg-open")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keyhook console: unexpected argument %q", fs.Arg(0))
	}
	u, err := consoleURL(apiURL, *token)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, u)
	if !*open {
		return nil
	}
	if opener == nil {
		opener = xdgOpen
	}
	if err := opener(ctx, u); err != nil {
		return fmt.Errorf("keyhook console: open: %w", err)
	}
	return nil
}

// consoleURL is the console of the API at base, with token in the
// fragment.
func consoleURL(base, token string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("keyhook console: --api-url (KEYHOOK_API_URL) %q is not an http or https URL", base)
	}
	if token == "" {
		return "", errors.New("keyhook console: a token is needed: set KEYHOOK_TOKEN (or --token)")
	}
	u = u.JoinPath("console") // JoinPath keeps a base path, drops a trailing slash
	u.Path += "/"
	u.RawQuery, u.Fragment, u.RawFragment = "", "", ""
	return u.String() + "#token=" + url.QueryEscape(token), nil
}

// xdgOpen hands u to the desktop's browser. It waits at most a few
// seconds: xdg-open returns once the browser has the address.
func xdgOpen(ctx context.Context, u string) error {
	path, err := exec.LookPath("xdg-open")
	if err != nil {
		return errors.New("xdg-open is not installed; open the address above in a browser")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, u).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
