// Package promtest runs a real Prometheus (Debian's prometheus, which
// scripts/deps.sh installs) for tests that check what a scraper sees,
// and queries it through its HTTP API.
package promtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
)

// Start runs Prometheus on loopback, scraping targets (HOST:PORT) every
// second, and returns its base URL; it is killed when the test ends.
func Start(t testing.TB, targets ...string) string {
	t.Helper()
	testenv.RequireTools(t, []string{"prometheus"})
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = fmt.Sprintf("%q", tg)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: strata\n    static_configs:\n      - targets: [%s]\n", strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	testenv.StartLogged(t, "prometheus", dir, cmd)
	return "http://" + addr
}

// Result is one series of an instant query's answer.
type Result struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Query runs an instant query through Prometheus's HTTP API; nil while
// it is not up yet or the query fails.
func Query(prom, q string) []Result {
	resp, err := http.Get(prom + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []Result `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		return nil
	}
	return r.Data.Result
}

// Value is the value of the one series q selects ("" when it selects
// none or several).
func Value(prom, q string) string {
	r := Query(prom, q)
	if len(r) != 1 {
		return ""
	}
	return fmt.Sprint(r[0].Value[1])
}
