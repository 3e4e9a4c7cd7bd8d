package console

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestConsoleServesItsFilesWithTheirTypes(t *testing.T) {
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path string
		status       int
		contentType  string
	}{
		{"GET", "/console/", 200, "text/html; charset=utf-8"},
		{"GET", "/console/index.html", 200, "text/html; charset=utf-8"},
		{"GET", "/console/subscription.js", 200, "text/javascript; charset=utf-8"},
		{"HEAD", "/console/style.css", 200, "text/css; charset=utf-8"},
		{"GET", "/console/../go.mod", 404, ""},
		{"GET", "/console/assets/app.js", 404, ""},
		{"GET", "/console", 301, ""},
		{"DELETE", "/console/app.js", 405, ""},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, "http://keyhook"+c.path, nil))
		if w.Code != c.status {
			t.Errorf("%s %s = %d, want %d", c.method, c.path, w.Code, c.status)
		}
		if c.contentType != "" && w.Header().Get("Content-Type") != c.contentType {
			t.Errorf("%s %s: Content-Type %q, want %q", c.method, c.path, w.Header().Get("Content-Type"), c.contentType)
		}
		if got := w.Header().Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("%s %s: Content-Security-Policy %q", c.method, c.path, got)
		}
		if c.method == "HEAD" && w.Body.Len() != 0 {
			t.Errorf("HEAD %s has a body", c.path)
		}
	}
	// A revalidation with the ETag gets 304.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://keyhook/console/app.js", nil))
	etag := w.Header().Get("ETag")
	r := httptest.NewRequest("GET", "http://keyhook/console/app.js", nil)
	r.Header.Set("If-None-Match", etag)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if etag == "" || w.Code != http.StatusNotModified {
		t.Errorf("GET with If-None-Match %q = %d, want 304", etag, w.Code)
	}
}

// The CSP forbids inline code; these checks keep the files within it
// and keep data out of the HTML parser, so that a record's key or body
// can only ever show as text.
func TestConsoleFilesHaveNoInlineCodeAndParseNoHTML(t *testing.T) {
	root, err := fs.Sub(assets, "assets")
	if err != nil {
		t.Fatal(err)
	}
	inline := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]|\son[a-z]+\s*=|style\s*=|javascript:`)
	sinks := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment|DOMParser|\beval\(|new Function\(|setAttribute\(\s*['"]style`)
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		text := string(data)
		switch {
		case strings.HasSuffix(name, ".html"):
			if m := inline.FindString(text); m != "" {
				t.Errorf("%s has inline code, which the CSP refuses: %q", name, m)
			}
		case strings.HasSuffix(name, ".js"):
			if m := sinks.FindString(text); m != "" {
				t.Errorf("%s uses %s; build elements with dom.js, text as text", name, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
