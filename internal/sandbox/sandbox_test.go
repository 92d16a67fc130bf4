package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/mountinfo"
	"github.com/strata-dev/strata/internal/testenv"
)

var (
	probeOnce sync.Once
	probeBin  string
	probeErr  error
)

// probe builds testdata/probe as a static binary, once.
func probe(t testing.TB) string {
	t.Helper()
	testenv.RequireRoot(t)
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "strata-probe-")
		if err != nil {
			probeErr = err
			return
		}
		probeBin = filepath.Join(dir, "probe")
		cmd := exec.Command("go", "build", "-o", probeBin, "./testdata/probe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			probeErr = fmt.Errorf("building the probe: %v\n%s", err, out)
		}
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probeBin
}

// tree makes a root with the probe at /usr/bin/probe and a secret only
// its owner (root) may read at /etc/secret.
func tree(t testing.TB) string {
	t.Helper()
	bin := probe(t)
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/probe"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/secret"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A node's own secrets: the login hashes and root's SSH key.
	if err := os.WriteFile(filepath.Join(root, "etc/shadow"), []byte("root:hash\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "root/.ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "root/.ssh/id_ed25519"), []byte("key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(root, "var/log/app.log")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(log, 33, 4); err != nil {
		t.Fatal(err)
	}
	return root
}

func report(t *testing.T, out string) map[string]string {
	t.Helper()
	r := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			r[k] = v
		}
	}
	return r
}

// TestConfinement runs the probe and checks every property the sandbox
// promises, each of which a chroot as root (what validation used to run
// in) fails.
func TestConfinement(t *testing.T) {
	root := tree(t)
	// The view's directory: this test's own (searchable, as /tmp is).
	tmp := t.TempDir()
	for _, d := range []string{tmp, filepath.Dir(tmp)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", tmp)
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := mounts(t)
	// A descriptor this process holds without close-on-exec (as one its
	// caller left open would be): it must not reach the command.
	leak, err := unix.Open(canary, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)
	out, err := Run(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe"}, Env: []string{"CANARY=" + canary}})
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	r := report(t, out)
	want := map[string]string{
		"pid":         "1",                  // PID 1 of its own namespace ...
		"pid1root":    "/ok",                // ... whose root is the view
		"uid":         "0",                  // root inside,
		"uidmap":      "0 1878982656 65536", // an unprivileged id outside
		"CapEff":      "0000000000000000",
		"CapPrm":      "0000000000000000",
		"CapInh":      "0000000000000000",
		"CapBnd":      "0000000000000000",
		"CapAmb":      "0000000000000000",
		"NoNewPrivs":  "1",
		"Seccomp":     "2",
		"Groups":      "",
		"hostname":    "strata-sandbox",
		"secret":      "s3cretok", // the tree's owners hold inside (id-mapped)
		"secretowner": "ok 0",
		"shadow":      "open /etc/shadow: permission denied",                   // hidden
		"rootkey":     "open /root/.ssh/id_ed25519: no such file or directory", // hidden
		"write":       "ok",                                                    // copy-on-write
		"tmpwrite":    "ok",
		"runwrite":    "ok", // a pid file, as nginx -t writes one
		"mount":       "operation not permitted",
		"unshare":     "operation not permitted",
		"keyctl":      "operation not permitted",
		"chroot":      "operation not permitted",
		"canary":      "stat " + canary + ": no such file or directory",
		"devnull":     "ok",
		"interfaces":  "lo",
		"lowbind":     "ok",                                       // its own network: nginx -t binds port 80
		"otherwrite":  "open /var/log/app.log: permission denied", // no CAP_DAC_OVERRIDE
		"vsock":       "address family not supported by protocol",
		"leaked":      "none", // the descriptor on the canary this test holds
	}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("%s = %q, want %q", k, r[k], v)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/written")); !os.IsNotExist(err) {
		t.Errorf("a write in the sandbox reached the tree: %v", err)
	}
	if after := mounts(t); after != before {
		t.Errorf("mounts left behind:\nbefore %s\nafter  %s", before, after)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "strata-sandbox-*")); len(left) > 0 {
		t.Errorf("directories left behind: %v", left)
	}
}

// mounts is this thread's mount table as one string of mount points.
func mounts(t *testing.T) string {
	t.Helper()
	ms, err := mountinfo.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var ps []string
	for _, m := range ms {
		ps = append(ps, m.Point)
	}
	sort.Strings(ps)
	return strings.Join(ps, " ")
}

// TestNetwork: no network unless asked for; with it, the host's.
func TestNetwork(t *testing.T) {
	root := tree(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	env := []string{"DIAL=" + l.Addr().String()}
	out, err := Run(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe"}, Env: env})
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	if d := report(t, out)["dial"]; d == "ok" || d == "" {
		t.Errorf("without Network, dialing the host's listener: %q, want a failure", d)
	}
	out, err = Run(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe"}, Env: env, Network: true})
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	if d := report(t, out)["dial"]; d != "ok" {
		t.Errorf("with Network, dialing the host's listener: %q, want ok", d)
	}
}

func TestLimits(t *testing.T) {
	root := tree(t)
	ctx := context.Background()
	start := time.Now()
	out, err := Run(ctx, Spec{Root: root, Argv: []string{"/usr/bin/probe", "sleep"}, Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("a command past its time limit: %v (%s), want ErrTimeout", err, out)
	}
	if d := time.Since(start); d > 5*time.Minute {
		t.Errorf("the sleeping command was not stopped (%s)", d)
	}
	// The default limit (4 GiB of address space; a Go program reserves
	// a few hundred MiB of it at start).
	out, err = Run(ctx, Spec{Root: root, Argv: []string{"/usr/bin/probe", "alloc", "6144"}})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(out, "cannot allocate memory") {
		t.Errorf("mapping 6 GiB under the default limit: %v (%s), want it refused", err, out)
	}
	// A limit smaller than the sandbox's own setup needs (this test
	// binary is a Go program of some size): the setup is done before
	// the limit applies, the command runs under it.
	if out, err := Run(ctx, Spec{Root: root, Argv: []string{"/usr/bin/probe", "alloc", "512"}, Memory: 900 << 20}); !strings.Contains(out, "cannot allocate memory") || errors.Is(err, ErrSandbox) {
		t.Errorf("mapping 512 MiB under a 900 MiB limit: %v (%s), want the probe to run and be refused", err, out)
	}
	if out, err := Run(ctx, Spec{Root: root, Argv: []string{"/usr/bin/probe", "alloc", "64"}}); err != nil || !strings.Contains(out, "alloc=ok") {
		t.Errorf("mapping 64 MiB under the default limit: %v (%s)", err, out)
	}
}

func TestRefusals(t *testing.T) {
	root := tree(t)
	ctx := context.Background()
	if _, err := Run(ctx, Spec{Root: root, Argv: []string{"usr/bin/probe"}}); err == nil {
		t.Error("a relative program path ran")
	}
	if _, err := Run(ctx, Spec{Root: root, Argv: []string{"/usr/bin/missing"}}); !errors.Is(err, ErrSandbox) || !strings.Contains(err.Error(), "/usr/bin/missing") {
		t.Errorf("a missing program: %v, want ErrSandbox naming it", err)
	}
	for _, p := range []string{"/proc/self/exe", "/dev/fd/3", "/sys/x"} {
		if _, err := Run(ctx, Spec{Root: root, Argv: []string{p}}); err == nil || !strings.Contains(err.Error(), "not a program of the tree") {
			t.Errorf("%s: %v, want it refused (a program from outside the view)", p, err)
		}
	}
	if _, err := Run(ctx, Spec{Root: filepath.Join(root, "nope"), Argv: []string{"/usr/bin/probe"}}); !errors.Is(err, ErrSandbox) {
		t.Errorf("a missing root: %v, want ErrSandbox", err)
	}
	// A tree whose /tmp and /dev are links out of it: the view replaces
	// them with its own, and nothing is mounted on the links' targets.
	target := t.TempDir()
	for _, d := range []string{"tmp", "dev", "proc"} {
		if err := os.Symlink(target, filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := Run(ctx, Spec{Root: root, Argv: []string{"/usr/bin/probe"}}); err != nil || report(t, out)["tmpwrite"] != "ok" {
		t.Errorf("a tree with linked /tmp, /dev, /proc: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(target); len(ents) > 0 {
		t.Errorf("the links' target was written: %v", ents)
	}
	for _, d := range []string{"tmp", "dev", "proc"} {
		if fi, err := os.Lstat(filepath.Join(root, d)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("/%s in the tree changed: %v", d, err)
		}
	}
}

func TestFilter(t *testing.T) {
	f := filter()
	if len(f) > 255 {
		t.Fatalf("filter of %d instructions: jumps are 8 bits", len(f))
	}
	last := f[len(f)-4:]
	for i, k := range []uint32{retAllow, retEPERM, retENOSYS, retKill} {
		if last[i].Code != bpfRet || last[i].K != k {
			t.Errorf("return %d: %+v", i, last[i])
		}
	}
}

// TestFileCaps: with FileCaps the command keeps the five file-permission
// capabilities (and nothing else), enough to append to a log another user
// owns; the append lands in the view, not the tree.
func TestFileCaps(t *testing.T) {
	root := tree(t)
	out, err := Run(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe"}, FileCaps: true})
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	r := report(t, out)
	for k, v := range map[string]string{
		"CapEff": "000000000000001f", "CapPrm": "000000000000001f", "CapBnd": "000000000000001f", "CapAmb": "000000000000001f",
		"NoNewPrivs": "1", "Seccomp": "2", "otherwrite": "ok", "mount": "operation not permitted", "unshare": "operation not permitted",
		"shadow": "open /etc/shadow: permission denied", // even CAP_DAC_OVERRIDE: its owner is not mapped
	} {
		if r[k] != v {
			t.Errorf("%s = %q, want %q", k, r[k], v)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "var/log/app.log")); err != nil || len(b) != 0 {
		t.Errorf("the tree's log file: %q %v, want it untouched", b, err)
	}
}

// TestWritable: a writable sandbox (a build step's) writes the tree
// itself, through the id mapping (root's files are uid 0's on disk, a
// chown to 33 is 33 on disk), keeps root's capabilities in its namespace
// (it can switch users, as apt does) but not the host's (mount still
// fails), and streams its output. A tree with a mount below it is refused.
func TestWritable(t *testing.T) {
	root := tree(t)
	var stream strings.Builder
	out, err := Run(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe", "build"}, Writable: true, RootCaps: true, Stream: &stream})
	if err != nil || out != "" {
		t.Fatalf("probe build: %v, returned %q\n%s", err, out, stream.String())
	}
	r := report(t, stream.String())
	for k, v := range map[string]string{"built": "ok", "chown": "ok", "tmp": "ok", "setuid": "ok", "uid": "100"} {
		if r[k] != v {
			t.Errorf("%s = %q, want %q\n%s", k, r[k], v, stream.String())
		}
	}
	for p, uid := range map[string]uint32{"etc/built": 0, "etc/owned33": 33} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, p), &st); err != nil || st.Uid != uid || st.Gid != uid {
			t.Errorf("%s on disk: %v, owner %d:%d, want %d:%d", p, err, st.Uid, st.Gid, uid, uid)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "tmp/scratch")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/tmp of a writable sandbox reached the tree: %v", err)
	}
	out, err = Run(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe"}, Writable: true, RootCaps: true})
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	r = report(t, out)
	if r["uidmap"] != fmt.Sprintf("0 %d 65536", HostIDBase) || r["mount"] != "operation not permitted" || r["pid"] != "1" {
		t.Errorf("uidmap %q, mount %q, pid %q: want the sandbox's mapping, mount refused, PID 1", r["uidmap"], r["mount"], r["pid"])
	}
	var bnd uint64
	if _, err := fmt.Sscanf(r["CapBnd"], "%x", &bnd); err != nil || bnd&(1<<unix.CAP_SETUID) == 0 || bnd&(1<<unix.CAP_SYS_MODULE) != 0 || bnd&(1<<unix.CAP_MKNOD) != 0 {
		t.Errorf("CapBnd = %q: want root's less modules and mknod", r["CapBnd"])
	}
	if r["write"] != "ok" || r["shadow"] != "root:hashok" {
		t.Errorf("write = %q, shadow = %q: want the writable tree as it is, nothing hidden", r["write"], r["shadow"])
	}
	if _, err := os.Stat(filepath.Join(root, "etc/written")); err != nil {
		t.Errorf("the write did not reach the writable tree: %v", err)
	}

	sub := filepath.Join(root, "mnt")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(sub, unix.MNT_DETACH)
	if _, err := Run(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe", "true"}, Writable: true}); !errors.Is(err, ErrSandbox) || !strings.Contains(err.Error(), sub) {
		t.Errorf("a writable tree with a mount below it: %v, want it refused naming %s", err, sub)
	}
}

// TestMemoryCgroup: memory the address-space limit does not count (a
// memfd written to) is bounded by the sandbox's control group: the
// command is stopped with ErrMemory, and the group is gone after. The
// same command within the bound runs.
func TestMemoryCgroup(t *testing.T) {
	root := tree(t)
	ctx := context.Background()
	// The groups this test's commands get (other tests and builds may
	// run sandboxes of their own meanwhile).
	var mine []string
	var mu sync.Mutex
	madeCgroup = func(dirs []string) { mu.Lock(); mine = append(mine, dirs...); mu.Unlock() }
	t.Cleanup(func() { madeCgroup = func([]string) {} })
	spec := Spec{Root: root, Argv: []string{"/usr/bin/probe", "memfd", "1536"}, Memory: 1 << 30, FileSize: 4 << 30}
	out, err := Run(ctx, spec)
	if !errors.Is(err, ErrMemory) || strings.Contains(out, "memfd=ok") {
		t.Fatalf("1.5 GiB in a memfd under a 1 GiB bound: %v\n%s", err, out)
	}
	spec.Argv = []string{"/usr/bin/probe", "memfd", "64"}
	if out, err := Run(ctx, spec); err != nil || !strings.Contains(out, "memfd=ok") {
		t.Fatalf("64 MiB in a memfd under a 1 GiB bound: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(mine) == 0 {
		t.Fatal("the commands ran in no control group")
	}
	var left []string
	for _, d := range mine {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	if len(left) > 0 {
		t.Errorf("control groups left behind: %v", left)
	}
}

// TestMaskedProc: a caller whose /proc has a read-only /proc/sys over it
// (as a container's, or a test node's) still gives the sandbox a fresh
// /proc (the kernel would refuse the sandbox's own mount of it there).
func TestMaskedProc(t *testing.T) {
	root := tree(t)
	done := make(chan error, 1)
	var out string
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND, ""); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("", "/proc/sys", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			done <- err
			return
		}
		var err error
		out, err = RunHere(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe"}})
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("probe under a masked /proc: %v\n%s", err, out)
	}
	if r := report(t, out); r["pid"] != "1" || r["pid1root"] != "/ok" {
		t.Errorf("pid %q, /proc/1/root %q: want the sandbox's own /proc", r["pid"], r["pid1root"])
	}
}

// BenchmarkRun is the cost of one sandboxed command that does nothing:
// the view built and torn down, two re-executions (the id-mapping holder
// once per process, the sandbox's first process every time), the exec.
func BenchmarkRun(b *testing.B) {
	root := tree(b)
	ctx := context.Background()
	for b.Loop() {
		if out, err := Run(ctx, Spec{Root: root, Argv: []string{"/usr/bin/probe", "true"}}); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}

// A private $TMPDIR (0700, as a user's own can be) would shut the
// sandbox's unprivileged first process out of its view: the view goes to
// /tmp instead.
func TestPrivateTmpdir(t *testing.T) {
	root := tree(t)
	t.Setenv("TMPDIR", t.TempDir()) // 0700
	if out, err := Run(context.Background(), Spec{Root: root, Argv: []string{"/usr/bin/probe", "true"}}); err != nil {
		t.Fatalf("with a private TMPDIR: %v\n%s", err, out)
	}
}

// Started under the child's name in the host's namespaces (by mistake or
// on purpose), the binary stops before it touches a mount.
func TestChildOutsideSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := filepath.Join(t.TempDir(), "cfg.json")
	if err := os.WriteFile(cfg, []byte(`{"root":"/nonexistent","argv":["/bin/true"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{childArg0}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles = []*os.File{f, w}
	err = cmd.Run()
	w.Close()
	msg, _ := io.ReadAll(r)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(string(msg), "runs only as the sandbox's first process") {
		t.Fatalf("the child outside a sandbox: %v, %q", err, msg)
	}
}
