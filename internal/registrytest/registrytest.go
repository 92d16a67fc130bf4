package registrytest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/testenv"
)

// Start runs docker-registry on a free loopback port with its storage in
// a temporary directory, waits until it answers, and stops it when the
// test ends. It returns HOST:PORT.
func Start(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start(t, nil, addr, func() error {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		return nil
	})
	return addr
}

// StartIn runs docker-registry as Start does, but inside the network
// namespace at netns (such as /proc/PID/ns/net of a test node), listening
// on addr there; ready reports when it answers (the test's own network
// cannot reach it).
func StartIn(t testing.TB, netns, addr string, ready func() error) {
	t.Helper()
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Fatalf("nsenter is required (util-linux): %v", err)
	}
	start(t, []string{nsenter, "--net=" + netns}, addr, ready)
}

// start runs docker-registry under the command prefix wrap, listening on
// addr, until ready succeeds.
func start(t testing.TB, wrap []string, addr string, ready func() error) {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("docker-registry is required (make test installs it: scripts/deps.sh): %v", err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := append(append(append([]string{}, wrap...), bin), "serve", filepath.Join(dir, "config.yml"))
	testenv.StartLogged(t, "docker-registry", dir, exec.Command(argv[0], argv[1:]...))
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("docker-registry did not answer on %s: %v\n%s", addr, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
