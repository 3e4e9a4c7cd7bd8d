package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of the API client commands.
const (
	defaultAPIURL = "http://127.0.0.1:8080"
	// cliTimeout bounds one API call; a seek waits for every node to
	// drain, so it is generous.
	cliTimeout = 2 * time.Minute
	// maxAnswerBytes bounds how much of an answer the CLI reads.
	maxAnswerBytes = 64 << 20
)

// apiClient talks to a keyhook API on behalf of one CLI command.
type apiClient struct {
	base   *url.URL
	token  string
	output string
	http   *http.Client
}

// clientFlags are the flags every API command takes.
type clientFlags struct {
	apiURL, token, output string
}

// add registers the client flags on fs, defaulting to their KEYHOOK_*
// variables.
func (f *clientFlags) add(fs *flag.FlagSet, getenv func(string) string) {
	def := getenv("KEYHOOK_API_URL")
	if def == "" {
		def = defaultAPIURL
	}
	fs.StringVar(&f.apiURL, "api-url", def, "keyhook API base URL (KEYHOOK_API_URL)")
	fs.StringVar(&f.token, "token", getenv("KEYHOOK_TOKEN"), "API token (KEYHOOK_TOKEN; prefer the variable, which stays out of the process list)")
	fs.StringVar(&f.output, "o", "table", "output: table or json")
}

func (f *clientFlags) client(cmd string) (*apiClient, error) {
	u, err := url.Parse(f.apiURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("keyhook %s: --api-url (KEYHOOK_API_URL) %q is not an http or https URL", cmd, f.apiURL)
	}
	if f.output != "table" && f.output != "json" {
		return nil, fmt.Errorf("keyhook %s: -o %q: want table or json", cmd, f.output)
	}
	return &apiClient{base: u, token: f.token, output: f.output, http: &http.Client{Timeout: cliTimeout}}, nil
}

// problemError is an API error answer, printed as its title, detail and
// field errors.
type problemError struct {
	Status int    `json:"status"`
	Type   string `json:"type"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func (p *problemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d)", p.Title, p.Status)
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	for _, fe := range p.Errors {
		fmt.Fprintf(&b, "\n  %s: %s", fe.Field, fe.Message)
	}
	return b.String()
}

// do sends one request and returns the answer's body, or an error: a
// *problemError for an error answer, whatever the API said in it.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, header map[string]string, body any) ([]byte, http.Header, error) {
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		default:
			data, err := json.Marshal(b)
			if err != nil {
				return nil, nil, err
			}
			rd = bytes.NewReader(data)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: read answer: %w", method, u.Redacted(), err)
	}
	if resp.StatusCode >= 400 {
		p := &problemError{}
		if json.Unmarshal(data, p) != nil || p.Title == "" {
			p = &problemError{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), Detail: strings.TrimSpace(string(data))}
		}
		p.Status = resp.StatusCode
		return nil, resp.Header, p
	}
	return data, resp.Header, nil
}

// printJSON writes data, a JSON document, indented.
func printJSON(w io.Writer, data []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, data, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// parseInterspersed parses fs over args letting flags and positional
// arguments mix ("get ID -o json" as well as "get -o json ID"), and
// returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
