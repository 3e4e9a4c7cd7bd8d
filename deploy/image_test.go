package deploy_test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// imageConfig is what the tests read from an OCI image: its config and the
// files of its layers.
type imageConfig struct {
	User         string              `json:"User"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint"`
	Cmd          []string            `json:"Cmd"`
	files        map[string]*tar.Header
}

// readOCIArchive reads an oci-archive (a tar of an OCI image layout with
// one image), as scripts/image.sh writes it.
func readOCIArchive(path string) (*imageConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The layout is small but for its layers: read it whole, by name.
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		blobs[strings.TrimPrefix(h.Name, "./")] = b
	}
	type descriptor struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
	}
	blob := func(d descriptor) ([]byte, error) {
		algo, hex, _ := strings.Cut(d.Digest, ":")
		b, ok := blobs["blobs/"+algo+"/"+hex]
		if !ok {
			return nil, fmt.Errorf("blob %s is not in the archive", d.Digest)
		}
		return b, nil
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		return nil, fmt.Errorf("index.json: want one manifest (%v)", err)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	b, err := blob(index.Manifests[0])
	if err == nil {
		err = json.Unmarshal(b, &manifest)
	}
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	var config struct {
		Config imageConfig `json:"config"`
	}
	if b, err = blob(manifest.Config); err == nil {
		err = json.Unmarshal(b, &config)
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := &config.Config
	c.files = map[string]*tar.Header{}
	for _, l := range manifest.Layers {
		b, err := blob(l)
		if err != nil {
			return nil, err
		}
		var r io.Reader = strings.NewReader(string(b))
		if strings.HasSuffix(l.MediaType, "+gzip") {
			if r, err = gzip.NewReader(r); err != nil {
				return nil, fmt.Errorf("layer %s: %w", l.Digest, err)
			}
		}
		lt := tar.NewReader(r)
		for {
			h, err := lt.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", l.Digest, err)
			}
			c.files["/"+strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")] = h
		}
	}
	return c, nil
}

func (c *imageConfig) env(name string) string {
	for _, e := range c.Env {
		if k, v, ok := strings.Cut(e, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// The image scripts/image.sh builds is the one the Kubernetes manifests
// and the Dockerfile describe: its user is the pod's, its one port is the
// container's http port (which the probes and the Service use), its
// entrypoint and command are the Dockerfile's and the container's args.
// CI builds the image and names it in KEYHOOK_IMAGE.
func TestImageIsWhatTheDockerfileAndTheManifestsDescribe(t *testing.T) {
	path := os.Getenv("KEYHOOK_IMAGE")
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("KEYHOOK_IMAGE is not set: CI checks the image scripts/image.sh builds")
		}
		t.Skip("KEYHOOK_IMAGE names no image; build one with scripts/image.sh and set it to the archive's path")
	}
	img, err := readOCIArchive(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	k := loadKit(t)

	pod := k.deployment.Template.Spec.SecurityContext
	if want := fmt.Sprintf("%d:%d", pod.RunAsUser, pod.RunAsGroup); img.User != want {
		t.Errorf("the image runs as %q, the pod as %s (runAsUser:runAsGroup)", img.User, want)
	}
	if img.User != k.docker.finalUser {
		t.Errorf("the image runs as %q, the Dockerfile's as %q", img.User, k.docker.finalUser)
	}

	var httpPort int
	for _, p := range k.container.Ports {
		if p.Name == "http" {
			httpPort = p.ContainerPort
		}
	}
	wantPorts := map[string]struct{}{strconv.Itoa(httpPort) + "/tcp": {}}
	if diff := cmp.Diff(wantPorts, img.ExposedPorts); diff != "" {
		t.Errorf("the image's exposed ports are not the container's http port (-want +got):\n%s", diff)
	}
	for name, p := range map[string]*probe{"readiness": k.container.ReadinessProbe, "liveness": k.container.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || (p.HTTPGet.Port != "http" && string(p.HTTPGet.Port) != strconv.Itoa(httpPort)) {
			t.Errorf("the %s probe does not use the image's port %d", name, httpPort)
		}
	}
	addr := img.env("KEYHOOK_HTTP_ADDR")
	if addr != envValue(k.container, "KEYHOOK_HTTP_ADDR") || addr != k.docker.env["KEYHOOK_HTTP_ADDR"] {
		t.Errorf("the image's KEYHOOK_HTTP_ADDR %q, the container's %q, the Dockerfile's %q: want one address",
			addr, envValue(k.container, "KEYHOOK_HTTP_ADDR"), k.docker.env["KEYHOOK_HTTP_ADDR"])
	}

	asJSON := func(v []string) string { b, _ := json.Marshal(v); return string(b) }
	if got := asJSON(img.Entrypoint); got != k.docker.entrypoint {
		t.Errorf("the image's entrypoint %s, the Dockerfile's %s", got, k.docker.entrypoint)
	}
	if got := asJSON(img.Cmd); got != k.docker.cmd || !slices.Equal(img.Cmd, k.container.Args) {
		t.Errorf("the image's command %s, the Dockerfile's %s, the container's args %v", got, k.docker.cmd, k.container.Args)
	}

	// What a static binary from scratch needs, and nothing to run as root.
	if h := img.files["/keyhook"]; h == nil || h.Mode&0o111 == 0 || h.Mode&0o6000 != 0 {
		t.Errorf("/keyhook is missing, not executable, or setuid: %+v", h)
	}
	if h := img.files["/etc/ssl/certs/ca-certificates.crt"]; h == nil || h.Size == 0 {
		t.Error("the image has no CA certificates at /etc/ssl/certs/ca-certificates.crt (TLS to Kafka, Redis and endpoints)")
	}
	for _, shell := range []string{"/bin/sh", "/bin/bash", "/usr/bin/sh"} {
		if img.files[shell] != nil {
			t.Errorf("the image has a shell, %s; it needs none", shell)
		}
	}
}
