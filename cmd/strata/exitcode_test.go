package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/squashfs"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay"
)

// TestExitCode pins the exit status of every sentinel error: the ones that
// reject an input (the manifests.ErrRejected class) exit 3, wrapped or
// joined; the lock and a failed restart take precedence.
func TestExitCode(t *testing.T) {
	rejected := []error{
		sign.ErrBadSignature, sign.ErrUnsigned, sign.ErrNoKeys,
		overlay.ErrSequence, overlay.ErrConstraint, overlay.ErrPayload, overlay.ErrFormat,
		overlay.ErrSymlinkPath, node.ErrDrift, overlay.ErrEmpty,
		manifests.ErrUnsafePath, manifests.ErrInvalid, manifests.ErrVersion, manifests.ErrTooLarge,
		tree.ErrSpecialFile, tree.ErrHardlink, tree.ErrDuplicate, tree.ErrLimit,
		repo.ErrTampered, repo.ErrNoManifest, builder.ErrRecipe, builder.ErrImageMismatch,
		disk.ErrTooSmall, disk.ErrMounted, builder.ErrCache, nodestate.ErrNotNode, disk.ErrNotNodeDisk, disk.ErrSecureBoot,
		catalog.ErrUnknownUnit, catalog.ErrBadPath, catalog.ErrSymlinkLoop,
	}
	for _, s := range rejected {
		for _, err := range []error{s, fmt.Errorf("op %s: %w", "/p", s), errors.Join(errors.New("other"), fmt.Errorf("op: %w", s))} {
			if got := exitCode(err); got != exitRejected {
				t.Errorf("exitCode(%v) = %d, want %d", err, got, exitRejected)
			}
		}
	}
	plain := []error{
		errors.New("plain"), repo.ErrExists, node.ErrNothingToRollback,
		tree.ErrNotExist, tree.ErrNotDir, squashfs.ErrTool, builder.ErrNeedRoot,
		fmt.Errorf("op: %v", manifests.ErrInvalid), // %v drops the class
	}
	for _, err := range plain {
		if got := exitCode(err); got != exitError {
			t.Errorf("exitCode(%v) = %d, want %d", err, got, exitError)
		}
	}
	if got := exitCode(errors.Join(nodestate.ErrLocked, sign.ErrUnsigned)); got != exitLocked {
		t.Errorf("locked and rejected: %d, want %d", got, exitLocked)
	}
	if got := exitCode(errors.Join(sign.ErrUnsigned, node.ErrRestart)); got != exitRestart {
		t.Errorf("restart failed and rejected: %d, want %d", got, exitRestart)
	}
}

// A bad --hostname is a usage error with its own message, before
// anything is read or written.
func TestBadHostnameIsUsage(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "d.img")
	for h, want := range map[string]string{
		"bad host;reboot": "' ' is not allowed",
		"-x":              "starts or ends with '-'",
		"a..b":            "empty label",
	} {
		stderr := captureStderr(t, func() {
			if got := run(context.Background(), []string{"provision", "--image", "/nonexistent.squashfs", "--disk", disk, "--hostname", h}); got != exitUsage {
				t.Errorf("--hostname %q exited %d, want %d", h, got, exitUsage)
			}
		})
		if !strings.Contains(stderr, "--hostname") || !strings.Contains(stderr, want) {
			t.Errorf("--hostname %q: %q, want it to say %q", h, stderr, want)
		}
		if _, err := os.Stat(disk); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("--hostname %q: the disk was written", h)
		}
	}
}

// The Secure Boot key of an upgrade is for --disk (a node does not
// upgrade itself under Secure Boot), and comes with its certificate:
// usage errors before anything is read.
func TestUpgradeSecureBootIsUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--root", "/", "--secure-boot-key", "db.key", "--secure-boot-cert", "db.crt"}, "are for --disk"},
		{[]string{"--root", "/", "--efi-stub", "stub.efi"}, "are for --disk"},
		{[]string{"--disk", "d.img", "--efi-stub", "stub.efi"}, "--efi-stub needs --secure-boot-key"},
		{[]string{"--disk", "d.img", "--secure-boot-key", "db.key"}, "together"},
	} {
		args := append([]string{"upgrade", "--image", "/nonexistent.squashfs"}, c.args...)
		stderr := captureStderr(t, func() {
			if got := run(context.Background(), args); got != exitUsage {
				t.Errorf("%q exited %d, want %d", args, got, exitUsage)
			}
		})
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%q: %q, want it to say %q", args, stderr, c.want)
		}
	}
}

// captureStderr returns what fn writes to os.Stderr.
func captureStderr(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	fn()
	os.Stderr = old
	w.Close()
	return <-done
}

// Error messages quote what came from outside; its control and format
// characters are written as escapes, never sent to the terminal.
func TestEscapeControl(t *testing.T) {
	in := "--add /etc/a\x1b[31mb\nc\u202ed\u00e9=x"
	if got, want := escapeControl(in), `--add /etc/a\x1b[31mb\nc\u202edé=x`; got != want {
		t.Errorf("escapeControl = %q, want %q", got, want)
	}
	// As printed: a line break is escaped like any control character,
	// except the ones that start a quoted line of a command's output
	// (catalog.OutputLine), which print as lines, marked as quoted.
	if got, want := errorLines(in), `--add /etc/a\x1b[31mb\nc\u202edé=x`; got != want {
		t.Errorf("errorLines = %q, want %q", got, want)
	}
	if got, want := errorLines("refused: app.conf:\n  | bad\x1b[2J\nstrata: fake"), "refused: app.conf:\n  | bad\\x1b[2J\\nstrata: fake"; got != want {
		t.Errorf("errorLines = %q, want %q", got, want)
	}
}
