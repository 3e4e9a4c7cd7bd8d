package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// ContentSecurityPolicy is sent with every console answer: the page runs
// only its own modules and styles, loads nothing from elsewhere, talks
// only to its own origin (the API), and cannot be framed.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed assets
var assets embed.FS

// contentTypes are the media types of the files the console ships; a
// file of any other kind is not served.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// file is one asset, read once.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console. Mount it at Prefix; a request for Prefix
// itself gets index.html. It answers GET and HEAD only.
type Handler struct {
	files map[string]file
}

// New reads the embedded assets and returns their handler.
func New() (*Handler, error) {
	root, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	h := &Handler{files: make(map[string]file)}
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			return fmt.Errorf("console: asset %s has no known content type", name)
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		h.files[name] = file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if _, ok := h.files["index.html"]; !ok {
		return nil, fmt.Errorf("console: index.html is missing")
	}
	return h, nil
}

// ServeHTTP answers a request under Prefix with the asset it names.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "the console answers GET and HEAD only", http.StatusMethodNotAllowed)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	if name == "" {
		name = "index.html"
	}
	f, ok := h.files[name]
	if !ok {
		http.Error(w, "no such console file", http.StatusNotFound)
		return
	}
	hdr.Set("Content-Type", f.contentType)
	hdr.Set("ETag", f.etag)
	// Revalidated every time: a new binary's files show at once.
	hdr.Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && match == f.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr.Set("Content-Length", fmt.Sprint(len(f.body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(f.body)
}
