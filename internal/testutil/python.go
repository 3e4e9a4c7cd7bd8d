package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Python returns a Python that can run imports (a Python import
// statement): $KEYHOOK_PYTHON, else the venv that .ci/run and
// scripts/contract.sh make (~/.cache/keyhook/venv), else python3 on PATH.
// Without one the test is skipped, saying what is missing and how .ci/run
// installs it (install), except under CI, which must run it: there the
// test fails, saying what it checks with it (purpose).
func Python(t testing.TB, imports, purpose, install string) string {
	t.Helper()
	var candidates []string
	if p := os.Getenv("KEYHOOK_PYTHON"); p != "" {
		candidates = append(candidates, p)
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, ".cache", "keyhook", "venv", "bin", "python"))
	}
	candidates = append(candidates, "python3")
	for _, py := range candidates {
		if exec.Command(py, "-c", imports).Run() == nil {
			return py
		}
	}
	msg := "no python can run " + imports + " (" + install + ")"
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI must %s: %s", purpose, msg)
	}
	t.Skip("SKIPPED: " + msg)
	return ""
}
