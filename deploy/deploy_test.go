package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/keyhook/keyhook/internal/testutil"
)

// The kit's files, relative to this package's directory.
const (
	dockerfile    = "Dockerfile"
	composeFile   = "compose.yaml"
	kustomizeDir  = "kubernetes"
	kustomization = "kubernetes/kustomization.yaml"
)

// Routes the probes and the ServiceMonitor may use. served says whether
// keyhook serves the route today; the others are promised by the API and
// observability work, and the test only logs while they are missing, then
// holds them to 200 once they answer.
var knownRoutes = map[string]struct{ served bool }{
	"/healthz": {served: true},
	"/readyz":  {served: false},
	"/metrics": {served: true},
}

// ---- parsing --------------------------------------------------------------

// intOrString is a Kubernetes port: a number or the name of a port.
type intOrString string

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	*v = intOrString(n.Value)
	return nil
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type probe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
}

type deployment struct {
	Replicas int           `yaml:"replicas"`
	Selector labelSelector `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
			SecurityContext               struct {
				RunAsNonRoot *bool `yaml:"runAsNonRoot"`
				RunAsUser    int   `yaml:"runAsUser"`
				RunAsGroup   int   `yaml:"runAsGroup"`
			} `yaml:"securityContext"`
			Containers []container `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type service struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string      `yaml:"name"`
		Port       int         `yaml:"port"`
		TargetPort intOrString `yaml:"targetPort"`
	} `yaml:"ports"`
}

type podDisruptionBudget struct {
	MinAvailable intOrString   `yaml:"minAvailable"`
	Selector     labelSelector `yaml:"selector"`
}

type serviceMonitor struct {
	Selector  labelSelector `yaml:"selector"`
	Endpoints []struct {
		Port          string `yaml:"port"`
		Path          string `yaml:"path"`
		Authorization *struct {
			Type        string `yaml:"type"`
			Credentials *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"credentials"`
		} `yaml:"authorization"`
	} `yaml:"endpoints"`
}

type scaledObject struct {
	ScaleTargetRef struct {
		Name string `yaml:"name"`
	} `yaml:"scaleTargetRef"`
	MinReplicaCount int `yaml:"minReplicaCount"`
	MaxReplicaCount int `yaml:"maxReplicaCount"`
	Triggers        []struct {
		Type              string            `yaml:"type"`
		Metadata          map[string]string `yaml:"metadata"`
		AuthenticationRef *struct {
			Name string `yaml:"name"`
		} `yaml:"authenticationRef"`
	} `yaml:"triggers"`
}

type triggerAuthentication struct {
	Env []struct {
		Parameter     string `yaml:"parameter"`
		Name          string `yaml:"name"`
		ContainerName string `yaml:"containerName"`
	} `yaml:"env"`
	SecretTargetRef []struct {
		Parameter string `yaml:"parameter"`
		Name      string `yaml:"name"`
		Key       string `yaml:"key"`
	} `yaml:"secretTargetRef"`
}

// object is one Kubernetes manifest; spec is decoded by kind.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec       yaml.Node         `yaml:"spec"`
	StringData map[string]string `yaml:"stringData"`
	file       string
}

type kustomizationFile struct {
	Resources          []string `yaml:"resources"`
	ConfigMapGenerator []struct {
		Name string   `yaml:"name"`
		Envs []string `yaml:"envs"`
	} `yaml:"configMapGenerator"`
	Images []struct {
		Name string `yaml:"name"`
	} `yaml:"images"`
}

type composeService struct {
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Image           string            `yaml:"image"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	ReadOnly        bool              `yaml:"read_only"`
	CapDrop         []string          `yaml:"cap_drop"`
	DependsOn       dependsOn         `yaml:"depends_on"`
}

// dependsOn is the services a compose service waits for, written as a list
// or as a map of conditions.
type dependsOn []string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.SequenceNode:
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		*d = names
	case yaml.MappingNode:
		for i := 0; i < len(n.Content); i += 2 {
			*d = append(*d, n.Content[i].Value)
		}
	default:
		return fmt.Errorf("depends_on: unexpected %s", n.Tag)
	}
	return nil
}

type composeProject struct {
	Services map[string]composeService `yaml:"services"`
}

// decodeDocs decodes every YAML document of path.
func decodeDocs(t *testing.T, path string) []yaml.Node {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var docs []yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, n)
	}
}

func decodeFile(t *testing.T, path string, v any) {
	t.Helper()
	docs := decodeDocs(t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", path, len(docs))
	}
	if err := docs[0].Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func decodeSpec[T any](t *testing.T, o object) T {
	t.Helper()
	var spec T
	if err := o.Spec.Decode(&spec); err != nil {
		t.Fatalf("%s: %s %s spec: %v", o.file, o.Kind, o.Metadata.Name, err)
	}
	return spec
}

// kit is everything the deploy directory says, parsed once per test.
type kit struct {
	kustomization kustomizationFile
	objects       []object
	configEnv     map[string]string // configMapGenerator envs, merged
	deployment    deployment
	container     container
	compose       composeProject
	docker        dockerfileInfo
}

func (k *kit) only(t *testing.T, kind string) object {
	t.Helper()
	var found []object
	for _, o := range k.objects {
		if o.Kind == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d manifests of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

func loadKit(t *testing.T) *kit {
	t.Helper()
	k := &kit{configEnv: map[string]string{}}
	decodeFile(t, kustomization, &k.kustomization)
	for _, r := range k.kustomization.Resources {
		path := filepath.Join(kustomizeDir, r)
		for _, n := range decodeDocs(t, path) {
			o := object{file: path}
			if err := n.Decode(&o); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			k.objects = append(k.objects, o)
		}
	}
	for _, g := range k.kustomization.ConfigMapGenerator {
		for _, e := range g.Envs {
			for key, v := range readEnvFile(t, filepath.Join(kustomizeDir, e)) {
				k.configEnv[key] = v
			}
		}
	}
	k.deployment = decodeSpec[deployment](t, k.only(t, "Deployment"))
	cs := k.deployment.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(cs))
	}
	k.container = cs[0]
	decodeFile(t, composeFile, &k.compose)
	k.docker = parseDockerfile(t, dockerfile)
	return k
}

// readEnvFile reads a kustomize env file: KEY=VALUE lines, # comments.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s:%d: %q is not KEY=VALUE", path, i+1, line)
		}
		out[key] = value
	}
	return out
}

// dockerfileInfo is what the tests need from the Dockerfile.
type dockerfileInfo struct {
	stages      []string // the image of each FROM
	finalUser   string   // USER of the last stage
	expose      []string
	env         map[string]string
	entrypoint  string
	cmd         string
	healthcheck bool
	buildRun    string // the RUN that runs go build
	args        map[string]string
}

// parseDockerfile reads instructions, joining continued lines and
// dropping comments.
func parseDockerfile(t *testing.T, path string) dockerfileInfo {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfileInfo{env: map[string]string{}, args: map[string]string{}}
	var instr string
	flush := func() {
		if instr == "" {
			return
		}
		op, rest, _ := strings.Cut(instr, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(op) {
		case "FROM":
			var image string
			for _, f := range strings.Fields(rest) {
				if !strings.HasPrefix(f, "--") {
					image = f
					break
				}
			}
			d.stages = append(d.stages, image)
			d.finalUser = ""
		case "USER":
			d.finalUser = rest
		case "EXPOSE":
			d.expose = append(d.expose, strings.Fields(rest)...)
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			d.env[k] = v
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			d.args[k] = v
		case "ENTRYPOINT":
			d.entrypoint = rest
		case "CMD":
			d.cmd = rest
		case "HEALTHCHECK":
			d.healthcheck = true
		case "RUN":
			if strings.Contains(rest, "go build") {
				d.buildRun = rest
			}
		}
		instr = ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if instr == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue // a comment inside a continued instruction
		}
		cont := strings.HasSuffix(line, "\\")
		line = strings.TrimSuffix(line, "\\")
		instr = strings.TrimSpace(instr + " " + line)
		if !cont {
			flush()
		}
	}
	flush()
	return d
}

// ---- the real binary -------------------------------------------------------

var serveHelp struct {
	once     sync.Once
	flags    map[string]string // flag name -> default ("" when none)
	err      error
	rawUsage string
}

// serveFlags runs `keyhook serve -h` on the built binary and returns every
// flag it lists with its default: the flags the real parser reads.
func serveFlags(t *testing.T) map[string]string {
	t.Helper()
	bin := testutil.KeyhookBinary(t)
	serveHelp.once.Do(func() {
		var out bytes.Buffer
		cmd := exec.Command(bin, "serve", "-h")
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = []string{} // no KEYHOOK_* from the test's environment
		_ = cmd.Run()        // -h exits non-zero by design
		serveHelp.rawUsage = out.String()
		flagLine := regexp.MustCompile(`^  -([a-z0-9-]+)`)
		def := regexp.MustCompile(`\(default "?([^")]*)"?\)`)
		flags := map[string]string{}
		var last string
		for line := range strings.SplitSeq(out.String(), "\n") {
			if m := flagLine.FindStringSubmatch(line); m != nil {
				last = m[1]
				flags[last] = ""
				continue
			}
			if m := def.FindStringSubmatch(line); m != nil && last != "" {
				flags[last] = m[1]
			}
		}
		if len(flags) == 0 {
			serveHelp.err = fmt.Errorf("keyhook serve -h listed no flags:\n%s", out.String())
		}
		serveHelp.flags = flags
	})
	if serveHelp.err != nil {
		t.Fatal(serveHelp.err)
	}
	return serveHelp.flags
}

// flagOf returns the flag an environment variable is the twin of.
func flagOf(env string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "KEYHOOK_")), "_", "-")
}

// ---- tests -----------------------------------------------------------------

func TestEveryYAMLFileParses(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		docs := decodeDocs(t, f)
		if len(docs) == 0 {
			t.Errorf("%s holds no YAML document", f)
		}
		for i, d := range docs {
			var v map[string]any
			if err := d.Decode(&v); err != nil || len(v) == 0 {
				t.Errorf("%s document %d is not a non-empty mapping: %v", f, i, err)
			}
		}
	}
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	k := loadKit(t)
	entries, err := os.ReadDir(kustomizeDir)
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") && e.Name() != filepath.Base(kustomization) {
			onDisk = append(onDisk, e.Name())
		}
	}
	listed := slices.Sorted(slices.Values(k.kustomization.Resources))
	if diff := cmp.Diff(onDisk, listed); diff != "" {
		t.Errorf("manifests on disk vs resources of kustomization.yaml (-disk +listed):\n%s", diff)
	}
	wantKinds := []string{"Deployment", "PodDisruptionBudget", "ScaledObject", "Secret", "Service", "ServiceMonitor", "TriggerAuthentication"}
	var kinds []string
	for _, o := range k.objects {
		kinds = append(kinds, o.Kind)
	}
	slices.Sort(kinds)
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Errorf("kinds of the manifests (-want +got):\n%s", diff)
	}
	if sm := k.only(t, "ServiceMonitor"); sm.APIVersion != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %q, want monitoring.coreos.com/v1", sm.APIVersion)
	}
	var images []string
	for _, i := range k.kustomization.Images {
		images = append(images, i.Name)
	}
	if !slices.Contains(images, k.container.Image) {
		t.Errorf("container image %q is not rewritten by kustomization images %v", k.container.Image, images)
	}
}

func TestPortsAgreeAcrossImageManifestsAndCompose(t *testing.T) {
	k := loadKit(t)
	c := k.container
	byName := map[string]int{}
	var numbers []string
	for _, p := range c.Ports {
		byName[p.Name] = p.ContainerPort
		numbers = append(numbers, strconv.Itoa(p.ContainerPort))
	}
	httpPort, ok := byName["http"]
	if !ok {
		t.Fatalf("the container has no port named http: %+v", c.Ports)
	}
	// resolve returns the container port a port reference names.
	resolve := func(ref intOrString) (int, bool) {
		if n, err := strconv.Atoi(string(ref)); err == nil {
			return n, slices.Contains(numbers, string(ref))
		}
		n, ok := byName[string(ref)]
		return n, ok
	}

	if _, port, err := net.SplitHostPort(envValue(c, "KEYHOOK_HTTP_ADDR")); err != nil || port != strconv.Itoa(httpPort) {
		t.Errorf("KEYHOOK_HTTP_ADDR %q does not listen on the http container port %d", envValue(c, "KEYHOOK_HTTP_ADDR"), httpPort)
	}
	for name, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			continue
		}
		if n, ok := resolve(p.HTTPGet.Port); !ok || n != httpPort {
			t.Errorf("%s probe port %q is not the http container port %d", name, p.HTTPGet.Port, httpPort)
		}
	}
	svc := decodeSpec[service](t, k.only(t, "Service"))
	svcPorts := map[string]bool{}
	for _, p := range svc.Ports {
		svcPorts[p.Name] = true
		if n, ok := resolve(p.TargetPort); !ok || n != httpPort {
			t.Errorf("Service port %s targets %q, not the http container port %d", p.Name, p.TargetPort, httpPort)
		}
	}
	for _, e := range decodeSpec[serviceMonitor](t, k.only(t, "ServiceMonitor")).Endpoints {
		if !svcPorts[e.Port] {
			t.Errorf("ServiceMonitor scrapes port %q, which the Service does not name", e.Port)
		}
	}
	if !slices.Equal(k.docker.expose, []string{strconv.Itoa(httpPort)}) {
		t.Errorf("Dockerfile EXPOSE %v, want the http container port %d", k.docker.expose, httpPort)
	}
	if _, port, err := net.SplitHostPort(k.docker.env["KEYHOOK_HTTP_ADDR"]); err != nil || port != strconv.Itoa(httpPort) {
		t.Errorf("Dockerfile ENV KEYHOOK_HTTP_ADDR %q does not listen on the exposed port %d", k.docker.env["KEYHOOK_HTTP_ADDR"], httpPort)
	}
	for name, s := range keyhookServices(t, k) {
		_, listen, err := net.SplitHostPort(s.Environment["KEYHOOK_HTTP_ADDR"])
		if err != nil {
			t.Errorf("compose %s: KEYHOOK_HTTP_ADDR %q: %v", name, s.Environment["KEYHOOK_HTTP_ADDR"], err)
			continue
		}
		for _, p := range s.Ports {
			if _, inside, _ := strings.Cut(p, ":"); inside != listen {
				t.Errorf("compose %s publishes %q, but keyhook listens on %s", name, p, listen)
			}
		}
	}
}

// keyhookServices returns the compose services that run the keyhook image.
func keyhookServices(t *testing.T, k *kit) map[string]composeService {
	t.Helper()
	out := map[string]composeService{}
	for name, s := range k.compose.Services {
		if s.Build != nil && s.Build.Dockerfile == "deploy/Dockerfile" {
			out[name] = s
		}
	}
	if len(out) < 2 {
		t.Fatalf("compose runs %d keyhook services, want 2", len(out))
	}
	return out
}

func envValue(c container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestEveryKEYHOOKVariableIsAServeFlag(t *testing.T) {
	k := loadKit(t)
	flags := serveFlags(t)
	vars := map[string]string{} // variable -> where it is set
	add := func(where string, names ...string) {
		for _, n := range names {
			vars[n] = where
		}
	}
	for _, e := range k.container.Env {
		add("deployment.yaml env", e.Name)
	}
	for n := range k.configEnv {
		add("config.env", n)
	}
	secret := k.only(t, "Secret")
	for n := range secret.StringData {
		add("secret.yaml", n)
	}
	for _, e := range decodeSpec[triggerAuthentication](t, k.only(t, "TriggerAuthentication")).Env {
		add("scaledobject.yaml TriggerAuthentication", e.Name)
	}
	for name, s := range k.compose.Services {
		for n := range s.Environment {
			add("compose.yaml "+name, n)
		}
	}
	for n := range k.docker.env {
		add("Dockerfile ENV", n)
	}
	var checked int
	for v, where := range vars {
		if !strings.HasPrefix(v, "KEYHOOK_") {
			continue
		}
		checked++
		if _, ok := flags[flagOf(v)]; !ok {
			t.Errorf("%s sets %s, but keyhook serve has no flag --%s", where, v, flagOf(v))
		}
	}
	if checked < 10 {
		t.Errorf("only %d KEYHOOK_* variables found in the kit", checked)
	}
	// envFrom turns every key into a variable: only keyhook's belong there.
	for n := range k.configEnv {
		if !strings.HasPrefix(n, "KEYHOOK_") {
			t.Errorf("config.env key %s is not a KEYHOOK_* variable", n)
		}
	}
	for n := range secret.StringData {
		if !strings.HasPrefix(n, "KEYHOOK_") {
			t.Errorf("secret.yaml key %s is not a KEYHOOK_* variable", n)
		}
	}
	for _, n := range []string{"KEYHOOK_KAFKA_BROKERS", "KEYHOOK_REDIS_URL"} {
		if vars[n] == "" || vars[n] == "Dockerfile ENV" {
			t.Errorf("the required %s is set nowhere in the manifests", n)
		}
	}
}

// TestServiceMonitorSendsTheMetricsToken defends the scrape: keyhook
// serves /metrics only to a token with the metrics scope (it names
// endpoint origins), so the ServiceMonitor must send the token that the
// pods make exist at start, read from the same Secret key.
func TestServiceMonitorSendsTheMetricsToken(t *testing.T) {
	k := loadKit(t)
	if _, ok := serveFlags(t)["metrics-token"]; !ok {
		t.Fatal("keyhook serve has no --metrics-token: nothing makes the scraper's token exist")
	}
	secret := k.only(t, "Secret")
	if _, ok := secret.StringData["KEYHOOK_METRICS_TOKEN"]; !ok {
		t.Error("the Secret has no KEYHOOK_METRICS_TOKEN: the pods make no token for the scraper")
	}
	if strings.EqualFold(k.configEnv["KEYHOOK_METRICS_PUBLIC"], "true") {
		t.Error("config.env serves /metrics without a token")
	}
	for _, e := range decodeSpec[serviceMonitor](t, k.only(t, "ServiceMonitor")).Endpoints {
		a := e.Authorization
		switch {
		case e.Path != "/metrics":
		case a == nil || a.Credentials == nil:
			t.Errorf("the ServiceMonitor scrapes %s without a bearer token: keyhook answers 401", e.Path)
		case a.Type != "" && a.Type != "Bearer":
			t.Errorf("the ServiceMonitor authorization type is %q, want Bearer", a.Type)
		case a.Credentials.Name != secret.Metadata.Name || a.Credentials.Key != "KEYHOOK_METRICS_TOKEN":
			t.Errorf("the ServiceMonitor sends %s/%s, want %s/KEYHOOK_METRICS_TOKEN", a.Credentials.Name, a.Credentials.Key, secret.Metadata.Name)
		}
	}
}

func TestNodeIDIsThePodName(t *testing.T) {
	k := loadKit(t)
	for _, e := range k.container.Env {
		if e.Name == "KEYHOOK_NODE_ID" {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("KEYHOOK_NODE_ID is not taken from metadata.name")
			}
			return
		}
	}
	t.Error("the Deployment does not set KEYHOOK_NODE_ID")
}

func TestProbePathsAreKeyhookRoutes(t *testing.T) {
	k := loadKit(t)
	paths := map[string]string{} // path -> who uses it
	for name, p := range map[string]*probe{"readiness probe": k.container.ReadinessProbe, "liveness probe": k.container.LivenessProbe} {
		if p != nil && p.HTTPGet != nil {
			paths[p.HTTPGet.Path] = name
		}
	}
	for _, e := range decodeSpec[serviceMonitor](t, k.only(t, "ServiceMonitor")).Endpoints {
		paths[e.Path] = "ServiceMonitor"
	}
	if k.container.LivenessProbe == nil || k.container.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("the liveness probe is not /healthz")
	}
	if k.container.ReadinessProbe == nil || k.container.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Error("the readiness probe is not /readyz")
	}
	for p, who := range paths {
		if _, ok := knownRoutes[p]; !ok {
			t.Errorf("the %s uses %s, which is not a keyhook route", who, p)
		}
	}

	// Ask a real node. It needs Kafka and Redis to start: kfake and a
	// redis-server on loopback.
	brokers := testutil.Kfake(t, 1)
	redisSrv := testutil.StartRedis(t)
	const metricsToken = "kh_deploy-probe-metrics-token-0123456789abcdef"
	node := testutil.StartKeyhook(t, "deploy-probe", "--kafka-brokers", brokers[0], "--redis-url", redisSrv.URL(),
		"--metrics-token", metricsToken)
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path, token string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodGet, "http://"+node.APIAddr+path, nil)
		if err != nil {
			return nil, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return client.Do(req)
	}
	for p, who := range paths {
		if _, ok := knownRoutes[p]; !ok {
			continue // already reported above
		}
		token := ""
		if who == "ServiceMonitor" {
			// What the ServiceMonitor sends, and what it would get without.
			token = metricsToken
			if resp, err := get(p, ""); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("GET %s without a token = %d, want 401", p, resp.StatusCode)
				}
			}
		}
		resp, err := get(p, token)
		if err != nil {
			t.Errorf("GET %s (%s): %v", p, who, err)
			continue
		}
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
		case !knownRoutes[p].served && resp.StatusCode == http.StatusNotFound:
			t.Logf("%s (used by the %s) is not served yet: it is expected from the API and observability work", p, who)
		default:
			t.Errorf("GET %s (%s) = %d, want 200", p, who, resp.StatusCode)
		}
	}
}

// stopMargin is what a stop needs past the drain and the attempts in
// flight: the final flush, the commit, leaving the group.
const stopMargin = 5 * time.Second

// A graceful stop outlasts the drain and the longest attempt in flight: a
// drain lets attempts already in flight run to the request timeout, and a
// pod killed before they end would have the next owner send them again.
func TestGracePeriodOutlastsTheDrainAndTheRequestTimeout(t *testing.T) {
	k := loadKit(t)
	flags := serveFlags(t)
	durationOf := func(where, flag, v string) time.Duration {
		if v == "" {
			v = flags[flag]
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %s %q: %v", where, flag, v, err)
		}
		return d
	}
	drain := durationOf("config.env", "drain-timeout", k.configEnv["KEYHOOK_DRAIN_TIMEOUT"])
	request := durationOf("config.env", "request-timeout", k.configEnv["KEYHOOK_REQUEST_TIMEOUT"])
	spec := k.deployment.Template.Spec
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("the Deployment leaves terminationGracePeriodSeconds at Kubernetes' 30s default")
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	var preStop time.Duration
	if l := k.container.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
		preStop = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
	}
	// The grace period runs from the preStop hook; SIGTERM comes after it.
	// Past the drain, attempts in flight run to their timeout, then the
	// node flushes, commits and leaves the group.
	if want := preStop + drain + request + stopMargin; grace < want {
		t.Errorf("terminationGracePeriodSeconds %v is short of the preStop pause %v + drain timeout %v + request timeout %v + %v margin = %v",
			grace, preStop, drain, request, stopMargin, want)
	}
	for name, s := range keyhookServices(t, k) {
		d := durationOf("compose "+name, "drain-timeout", s.Environment["KEYHOOK_DRAIN_TIMEOUT"])
		r := durationOf("compose "+name, "request-timeout", s.Environment["KEYHOOK_REQUEST_TIMEOUT"])
		g, err := time.ParseDuration(s.StopGracePeriod)
		if err != nil {
			t.Errorf("compose %s: stop_grace_period %q: %v", name, s.StopGracePeriod, err)
			continue
		}
		if want := d + r + stopMargin; g < want {
			t.Errorf("compose %s: stop_grace_period %v is short of the drain timeout %v + request timeout %v + %v margin = %v", name, g, d, r, stopMargin, want)
		}
	}
}

func TestPodRunsLockedDown(t *testing.T) {
	k := loadKit(t)
	pod := k.deployment.Template.Spec.SecurityContext
	if pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot {
		t.Error("the pod does not set runAsNonRoot: true")
	}
	sc := k.container.SecurityContext
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the container's root filesystem is not read-only")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("the container allows privilege escalation")
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("the container drops capabilities %v, want [ALL]", sc.Capabilities.Drop)
	}
	uid, _, _ := strings.Cut(k.docker.finalUser, ":")
	if strconv.Itoa(pod.RunAsUser) != uid {
		t.Errorf("the pod runs as user %d, the image as %q", pod.RunAsUser, k.docker.finalUser)
	}
	for _, r := range []string{"cpu", "memory"} {
		if k.container.Resources.Requests[r] == "" || k.container.Resources.Limits[r] == "" {
			t.Errorf("the container lacks a %s request or limit", r)
		}
	}
	limit := quantityBytes(t, k.container.Resources.Limits["memory"])
	if soft := quantityBytes(t, envValue(k.container, "GOMEMLIMIT")); soft <= 0 || soft >= limit {
		t.Errorf("GOMEMLIMIT %q is not below the memory limit %q", envValue(k.container, "GOMEMLIMIT"), k.container.Resources.Limits["memory"])
	}
	for name, s := range keyhookServices(t, k) {
		if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) {
			t.Errorf("compose %s is not read-only with every capability dropped", name)
		}
	}
}

// quantityBytes reads a memory size as Kubernetes (512Mi) or GOMEMLIMIT
// (460MiB) writes it.
func quantityBytes(t *testing.T, q string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("memory size %q: %v", q, err)
			}
			return v * u.mult
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Fatalf("memory size %q: %v", q, err)
	}
	return v
}

func TestSelectorsAndReferencesResolve(t *testing.T) {
	k := loadKit(t)
	d := k.only(t, "Deployment")
	podLabels := k.deployment.Template.Metadata.Labels
	matches := func(sel map[string]string, labels map[string]string) bool {
		if len(sel) == 0 {
			return false
		}
		for key, v := range sel {
			if labels[key] != v {
				return false
			}
		}
		return true
	}
	if !matches(k.deployment.Selector.MatchLabels, podLabels) {
		t.Error("the Deployment's selector does not match its pods")
	}
	svcObj := k.only(t, "Service")
	if !matches(decodeSpec[service](t, svcObj).Selector, podLabels) {
		t.Error("the Service's selector does not match the pods")
	}
	pdb := decodeSpec[podDisruptionBudget](t, k.only(t, "PodDisruptionBudget"))
	if !matches(pdb.Selector.MatchLabels, podLabels) {
		t.Error("the PodDisruptionBudget's selector does not match the pods")
	}
	if pdb.MinAvailable != "1" {
		t.Errorf("PodDisruptionBudget minAvailable %q, want 1", pdb.MinAvailable)
	}
	if !matches(decodeSpec[serviceMonitor](t, k.only(t, "ServiceMonitor")).Selector.MatchLabels, svcObj.Metadata.Labels) {
		t.Error("the ServiceMonitor's selector does not match the Service")
	}

	// envFrom names the generated ConfigMap and the Secret.
	var cmRefs, secretRefs []string
	for _, e := range k.container.EnvFrom {
		if e.ConfigMapRef != nil {
			cmRefs = append(cmRefs, e.ConfigMapRef.Name)
		}
		if e.SecretRef != nil {
			secretRefs = append(secretRefs, e.SecretRef.Name)
		}
	}
	var generated []string
	for _, g := range k.kustomization.ConfigMapGenerator {
		generated = append(generated, g.Name)
	}
	if len(cmRefs) == 0 || !slices.Equal(cmRefs, generated) {
		t.Errorf("envFrom ConfigMaps %v, generated %v", cmRefs, generated)
	}
	secret := k.only(t, "Secret")
	if !slices.Equal(secretRefs, []string{secret.Metadata.Name}) {
		t.Errorf("envFrom Secrets %v, want [%s]", secretRefs, secret.Metadata.Name)
	}

	so := decodeSpec[scaledObject](t, k.only(t, "ScaledObject"))
	if so.ScaleTargetRef.Name != d.Metadata.Name {
		t.Errorf("ScaledObject scales %q, the Deployment is %q", so.ScaleTargetRef.Name, d.Metadata.Name)
	}
	if so.MinReplicaCount != k.deployment.Replicas || so.MaxReplicaCount < so.MinReplicaCount {
		t.Errorf("ScaledObject replicas %d..%d, Deployment replicas %d", so.MinReplicaCount, so.MaxReplicaCount, k.deployment.Replicas)
	}
	ta := k.only(t, "TriggerAuthentication")
	auth := decodeSpec[triggerAuthentication](t, ta)
	saslNames := map[string]string{"plain": "plaintext", "scram-sha-256": "scram_sha256", "scram-sha-512": "scram_sha512"}
	for _, tr := range so.Triggers {
		if tr.Type != "kafka" {
			t.Errorf("ScaledObject trigger type %q, want kafka", tr.Type)
			continue
		}
		m := tr.Metadata
		if m["bootstrapServers"] != k.configEnv["KEYHOOK_KAFKA_BROKERS"] {
			t.Errorf("scaler brokers %q, keyhook's %q", m["bootstrapServers"], k.configEnv["KEYHOOK_KAFKA_BROKERS"])
		}
		if !strings.HasPrefix(m["consumerGroup"], "keyhook-") {
			t.Errorf("scaler consumer group %q is not keyhook's (keyhook-read-<hash> or keyhook-<id>)", m["consumerGroup"])
		}
		if _, err := strconv.Atoi(m["lagThreshold"]); err != nil {
			t.Errorf("scaler lagThreshold %q: %v", m["lagThreshold"], err)
		}
		if want := saslNames[k.configEnv["KEYHOOK_KAFKA_SASL_MECHANISM"]]; m["sasl"] != want {
			t.Errorf("scaler sasl %q, want %q to match KEYHOOK_KAFKA_SASL_MECHANISM", m["sasl"], want)
		}
		if tlsOn := k.configEnv["KEYHOOK_KAFKA_TLS"] == "true"; tlsOn != (m["tls"] == "enable") {
			t.Errorf("scaler tls %q, KEYHOOK_KAFKA_TLS %q", m["tls"], k.configEnv["KEYHOOK_KAFKA_TLS"])
		}
		if tr.AuthenticationRef == nil || tr.AuthenticationRef.Name != ta.Metadata.Name {
			t.Errorf("scaler authenticationRef does not name the TriggerAuthentication %q", ta.Metadata.Name)
		}
		// KEDA's Kafka scaler caps the replicas at the partition count
		// unless idle consumers are allowed; keyhook's pods beyond it share
		// partitions by key range, so they are not idle.
		if m["allowIdleConsumers"] != "true" {
			t.Errorf("scaler allowIdleConsumers %q: KEDA would cap the pods at the partition count, want \"true\"", m["allowIdleConsumers"])
		}
	}
	for _, e := range auth.Env {
		if e.ContainerName != k.container.Name {
			t.Errorf("TriggerAuthentication reads container %q, the pod runs %q", e.ContainerName, k.container.Name)
		}
		if _, ok := k.configEnv[e.Name]; !ok {
			t.Errorf("TriggerAuthentication reads %s, which config.env does not set", e.Name)
		}
	}
	for _, r := range auth.SecretTargetRef {
		if r.Name != secret.Metadata.Name {
			t.Errorf("TriggerAuthentication reads Secret %q, the kit has %q", r.Name, secret.Metadata.Name)
		} else if _, ok := secret.StringData[r.Key]; !ok {
			t.Errorf("TriggerAuthentication reads key %s, which the Secret lacks", r.Key)
		}
	}
}

func TestComposeReferencesResolve(t *testing.T) {
	k := loadKit(t)
	services := k.compose.Services
	for name, s := range services {
		for _, dep := range s.DependsOn {
			if _, ok := services[dep]; !ok {
				t.Errorf("compose %s depends on unknown service %s", name, dep)
			}
		}
		for _, v := range s.Volumes {
			if src, _, _ := strings.Cut(v, ":"); strings.HasPrefix(src, "./") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("compose %s mounts %s: %v", name, src, err)
				}
			}
		}
		if s.Build != nil {
			if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("compose %s builds from %s: %v", name, s.Build.Dockerfile, err)
			}
		}
	}
	for name, s := range keyhookServices(t, k) {
		if s.Environment["KEYHOOK_ALLOW_PRIVATE_ENDPOINTS"] != "true" {
			t.Errorf("compose %s refuses private endpoints, but the example function is on the compose network", name)
		}
		if id := s.Environment["KEYHOOK_NODE_ID"]; id == "" {
			t.Errorf("compose %s has no KEYHOOK_NODE_ID", name)
		}
		if ep := s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]; ep != "" {
			host := strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
			host, _, _ = strings.Cut(host, ":")
			if _, ok := services[host]; !ok {
				t.Errorf("compose %s exports telemetry to %s, which is not a service", name, ep)
			}
		}
		for _, w := range []string{"KAFKA_BROKERS", "REDIS_URL"} {
			if s.Environment["KEYHOOK_"+w] == "" {
				t.Errorf("compose %s does not set KEYHOOK_%s", name, w)
			}
		}
	}
	var collector struct {
		Exporters map[string]struct {
			Endpoint string `yaml:"endpoint"`
		} `yaml:"exporters"`
	}
	decodeFile(t, "otel-collector.yaml", &collector)
	for name, e := range collector.Exporters {
		if host, _, err := net.SplitHostPort(e.Endpoint); err == nil {
			if _, ok := services[host]; !ok {
				t.Errorf("collector exporter %s sends to %s, which is not a compose service", name, e.Endpoint)
			}
		}
	}
}

func TestDockerfileBuildsAStampedNonRootImage(t *testing.T) {
	d := parseDockerfile(t, dockerfile)
	if len(d.stages) < 2 {
		t.Fatalf("the Dockerfile has %d stages, want a build stage and a runtime stage", len(d.stages))
	}
	if !strings.HasPrefix(d.stages[0], "golang:1.26") {
		t.Errorf("the build stage is %s, want golang:1.26", d.stages[0])
	}
	final := d.stages[len(d.stages)-1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("the runtime stage is %s, want distroless/static or scratch", final)
	}
	if user, _, _ := strings.Cut(d.finalUser, ":"); user == "" || user == "root" || user == "0" {
		t.Errorf("the runtime stage runs as %q, want a non-root USER", d.finalUser)
	}
	if d.healthcheck {
		t.Error("the Dockerfile has a HEALTHCHECK; probes belong to the orchestrator")
	}
	if d.entrypoint != `["/keyhook"]` || d.cmd != `["serve"]` {
		t.Errorf("ENTRYPOINT %s CMD %s, want [\"/keyhook\"] [\"serve\"]", d.entrypoint, d.cmd)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=${VERSION}", "./cmd/keyhook"} {
		if !strings.Contains(d.buildRun, want) {
			t.Errorf("the build step lacks %s: %s", want, d.buildRun)
		}
	}
	if _, ok := d.args["VERSION"]; !ok {
		t.Error("the Dockerfile has no VERSION build argument")
	}

	// The stamp must reach `keyhook version`: build with the Dockerfile's
	// own -ldflags and ask the binary. Only the ldflags: -trimpath and
	// CGO_ENABLED=0 would change every package's build cache key and
	// recompile the world, and they do not affect the stamp.
	m := regexp.MustCompile(`-ldflags "([^"]*)"`).FindStringSubmatch(d.buildRun)
	if m == nil {
		t.Fatalf("no -ldflags \"...\" in the build step: %s", d.buildRun)
	}
	ldflags := strings.ReplaceAll(m[1], "${VERSION}", "v9.8.7-deploytest")
	bin := filepath.Join(t.TempDir(), "keyhook")
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "../cmd/keyhook")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build with the Dockerfile's flags: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("keyhook version: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != "keyhook v9.8.7-deploytest" {
		t.Errorf("keyhook version printed %q, want %q", got, "keyhook v9.8.7-deploytest")
	}
}
