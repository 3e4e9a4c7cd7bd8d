package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

func TestConsoleCommandPrintsTheAddressWithTheTokenInTheFragment(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"default API", map[string]string{"KEYHOOK_TOKEN": "kh_abc"}, nil, "http://127.0.0.1:8080/console/#token=kh_abc"},
		{"from the environment", map[string]string{"KEYHOOK_TOKEN": "kh_abc", "KEYHOOK_API_URL": "https://ops.example/keyhook/"}, nil, "https://ops.example/keyhook/console/#token=kh_abc"},
		{"flags win", map[string]string{"KEYHOOK_TOKEN": "kh_abc"}, []string{"--api-url", "http://10.0.0.1:9000?x=1", "--token", "kh_x+/="}, "http://10.0.0.1:9000/console/#token=kh_x%2B%2F%3D"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), append([]string{"console"}, c.args...), func(k string) string { return c.env[k] }, &out, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out.String()); got != c.want {
				t.Errorf("printed %q, want %q", got, c.want)
			}
		})
	}
}

func TestConsoleCommandOpensOnlyWhenAsked(t *testing.T) {
	var opened []string
	opener := func(_ context.Context, u string) error { opened = append(opened, u); return nil }
	env := func(k string) string { return map[string]string{"KEYHOOK_TOKEN": "kh_abc"}[k] }
	if err := consoleCmd(context.Background(), nil, env, io.Discard, io.Discard, opener); err != nil {
		t.Fatal(err)
	}
	if len(opened) != 0 {
		t.Errorf("opened %v without --open", opened)
	}
	if err := consoleCmd(context.Background(), []string{"--open"}, env, io.Discard, io.Discard, opener); err != nil {
		t.Fatal(err)
	}
	if len(opened) != 1 || opened[0] != "http://127.0.0.1:8080/console/#token=kh_abc" {
		t.Errorf("opened %v, want the console's address once", opened)
	}
}

func TestConsoleCommandNeedsATokenAndAnHTTPURL(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"KEYHOOK_TOKEN": "kh_abc", "KEYHOOK_API_URL": "ftp://host"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), []string{"console"}, func(k string) string { return env[k] }, &out, io.Discard)
		if err == nil || out.Len() != 0 {
			t.Errorf("with %v: printed %q, err %v; want an error and nothing printed", env, out.String(), err)
		}
	}
}
