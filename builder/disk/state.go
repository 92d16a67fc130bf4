package disk

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// Paths on the state partition (ext4, label "state"). The booted node
// mounts it and bind-mounts its var/ over /var, so the ledger is at the
// node's usual /var/lib/strata/ledger.json.
const (
	// StateIdentityDir holds the node identity.
	StateIdentityDir = "identity"
	// StateNodeIDPath is the node id, one line.
	StateNodeIDPath = StateIdentityDir + "/node-id"
	// StateHostnamePath is the hostname, one line (absent if none given).
	StateHostnamePath = StateIdentityDir + "/hostname"
	// StateAuthorizedKeysPath is root's SSH authorized_keys (absent if
	// none given).
	StateAuthorizedKeysPath = StateIdentityDir + "/ssh/authorized_keys"
)

// writeState stages the state partition's tree in work — the ledger with
// one provision record naming the image, the manifest's signature, the
// node identity — and makes the ext4 filesystem from it at the partition's
// offset with mkfs.ext4 -d (go-diskfs 1.9.4's ext4 writer cannot yet create
// directories).
func writeState(ctx context.Context, target string, p Partition, im *repo.Image, image, nodeID string, opts Options, work string) (manifests.LedgerEntry, error) {
	stage := filepath.Join(work, "state")
	nd := nodestate.Node{Root: stage}
	l, err := builder.WriteState(image, im, stage)
	if err != nil {
		return manifests.LedgerEntry{}, err
	}
	if err := os.MkdirAll(nd.Path(StateIdentityDir), 0o755); err != nil {
		return manifests.LedgerEntry{}, fmt.Errorf("staging the state partition: %w", err)
	}
	files := map[string][]byte{StateNodeIDPath: []byte(nodeID + "\n")}
	if opts.Hostname != "" {
		files[StateHostnamePath] = []byte(opts.Hostname + "\n")
	}
	if len(opts.AuthorizedKeys) > 0 {
		if err := os.MkdirAll(nd.Path(filepath.Dir(StateAuthorizedKeysPath)), 0o700); err != nil {
			return manifests.LedgerEntry{}, fmt.Errorf("staging the state partition: %w", err)
		}
		files[StateAuthorizedKeysPath] = opts.AuthorizedKeys
	}
	for rel, b := range files {
		mode := os.FileMode(0o644)
		if rel == StateAuthorizedKeysPath {
			mode = 0o600
		}
		if err := os.WriteFile(nd.Path(rel), b, mode); err != nil {
			return manifests.LedgerEntry{}, fmt.Errorf("staging the state partition: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "state", "-U", strings.ToLower(p.GUID),
		"-E", fmt.Sprintf("offset=%d,root_owner=0:0", p.Offset), "-d", stage, target, strconv.FormatInt(p.Size/1024, 10)+"k")
	if out, err := cmd.CombinedOutput(); err != nil {
		return manifests.LedgerEntry{}, fmt.Errorf("mkfs.ext4 on the state partition of %s: %w: %s", target, err, bytes.TrimSpace(out))
	}
	return l.Last(), nil
}

// checkNotMounted refuses the block device at p (fi) if it or any of its
// partitions appears in /proc/self/mountinfo. Its errors name p; callers
// add the operation.
func checkNotMounted(p string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot read the device number", p)
	}
	major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
	devs := map[string]bool{fmt.Sprintf("%d:%d", major, minor): true}
	// Partitions of the device: /sys/dev/block/M:m/<part>/dev.
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", major, minor)
	if ents, err := os.ReadDir(sys); err == nil {
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(sys, e.Name(), "dev")); err == nil {
				devs[strings.TrimSpace(string(b))] = true
			}
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("%s: checking mounts: %w", p, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && devs[fields[2]] {
			return fmt.Errorf("%s: device %s is mounted at %s: %w", p, fields[2], fields[4], ErrMounted)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: checking mounts: %w", p, err)
	}
	return nil
}
