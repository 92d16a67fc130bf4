package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/tests/fixture"
)

// captureOutput returns what fn writes to os.Stdout and os.Stderr.
func captureOutput(t *testing.T, fn func()) (stdout, stderr string) {
	t.Helper()
	stdout = captureStream(t, &os.Stdout, func() { stderr = captureStderr(t, fn) })
	return stdout, stderr
}

func captureStream(t *testing.T, f **os.File, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := *f
	*f = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	fn()
	*f = old
	w.Close()
	return <-done
}

// editorWriting is an $EDITOR that replaces the file it is given with
// content.
func editorWriting(t *testing.T, content string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "content")
	if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ed := filepath.Join(t.TempDir(), "editor")
	if err := os.WriteFile(ed, []byte("#!/bin/sh\ncat "+src+" > \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return ed
}

// config edit --yes asks nothing, and prints the diff and the plan it
// published all the same; an edit the service's validation refuses is
// kept, the error says how to publish it once it is fixed, and no
// progress line said "publishing" before the refusal.
func TestConfigEditYesPrintsThePlan(t *testing.T) {
	f := fixture.New(t, fixture.WithValidator())
	t.Setenv("VISUAL", "")
	t.Setenv("EDITOR", editorWriting(t, "port 81\n"))
	var code int
	out, errOut := captureOutput(t, func() {
		code = run(context.Background(), []string{"config", "edit", "--repo", f.Repo, "--key", f.KeyPath, "--yes", "/etc/app/app.conf"})
	})
	if code != 0 {
		t.Fatalf("config edit --yes exited %d:\n%s", code, errOut)
	}
	for _, want := range []string{"etc/app/app.conf", "-port 80", "+port 81", "services (1):", "app.service", "validated app.service", "published test 1.0.1"} {
		if !strings.Contains(out, want) {
			t.Errorf("config edit --yes printed no %q:\n%s", want, out)
		}
	}

	t.Setenv("EDITOR", editorWriting(t, "port 82\nbad port\n"))
	out, errOut = captureOutput(t, func() {
		code = run(context.Background(), []string{"config", "edit", "--repo", f.Repo, "--key", f.KeyPath, "--yes", "/etc/app/app.conf"})
	})
	if code != exitRejected || !strings.Contains(errOut, "your edit is kept in ") ||
		!strings.Contains(errOut, "fix it, then strata config set --repo "+f.Repo+" --key "+f.KeyPath+" /etc/app/app.conf=") {
		t.Fatalf("a refused edit exited %d:\n%s%s", code, out, errOut)
	}
	if strings.Contains(errOut, "publishing") {
		t.Errorf("a refused edit was announced as publishing:\n%s", errOut)
	}
	if strings.Count(errOut, "bad port") != 1 {
		t.Errorf("the validation's output is not shown exactly once:\n%s", errOut)
	}
}
