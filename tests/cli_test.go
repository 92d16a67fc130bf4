package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

var (
	// strataBin is the strata binary TestMain built.
	strataBin string
	// demoDir is the absolute path of images/demo.
	demoDir string
)

// requiredTools are the external programs strata and the scripts run.
var requiredTools = []string{"mksquashfs", "sqfs2tar", "rdsquashfs", "minisign"}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("tests: the end-to-end tests run the strata binary with the real tools; make test runs them, make unit does not")
		return 0
	}
	// Files the scripts create, and trees laid over images with
	// --tree, take their modes from the umask: pin it.
	syscall.Umask(0o022)
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "tests: must run as root (images hold files owned by other users)")
		return 1
	}
	var missing []string
	for _, tool := range requiredTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "tests: missing tools on $PATH: %s (run scripts/deps.sh)\n", strings.Join(missing, ", "))
		return 1
	}
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		return 1
	}
	demoDir = filepath.Join(root, "images", "demo")
	binDir, err := os.MkdirTemp("", "strata-tests-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	strataBin = filepath.Join(binDir, "strata")
	build := exec.Command("go", "build", "-o", strataBin, "./cmd/strata")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "tests: building strata:", err)
		return 1
	}
	return m.Run()
}

// TestScripts runs testdata/script/*.txtar.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "script"),
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", filepath.Dir(strataBin)+string(os.PathListSeparator)+env.Getenv("PATH"))
			dst := filepath.Join(env.WorkDir, "demo")
			if err := os.CopyFS(dst, os.DirFS(demoDir)); err != nil {
				return fmt.Errorf("copying %s: %w", demoDir, err)
			}
			env.Setenv("DEMO", dst)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode":  cmdExitcode,
			"jsonfield": cmdJSONField,
			"jsonenv":   cmdJSONEnv,
			"magic":     cmdMagic,
		},
	})
}

// cmdExitcode runs a program like exec and requires an exact exit status:
//
//	exitcode 3 strata apply-overlay --root node next.overlay.tar.zst
//
// Its stdout and stderr are kept for the stdout and stderr commands.
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitcode (name the status you expect)")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %q is not a number", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: running %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// cmdJSONField checks one value of a JSON document:
//
//	jsonfield stdout manifest.services.0.action reload
//	jsonfield stdout findings.@len 0
//
// FILE is stdout, stderr or a file. PATH is a dot-separated list of
// object keys and array indexes; an element "@len" gives the length of
// the array or object. Strings compare as their text, everything else
// as compact JSON (true, 3, [], {"a":1}). With !, the value must differ
// or be missing.
func cmdJSONField(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: jsonfield FILE PATH WANT")
	}
	got, err := jsonLookup(ts.ReadFile(args[0]), args[1])
	switch {
	case neg && (err != nil || got != args[2]):
		return
	case neg:
		ts.Fatalf("%s: %s is %q, want anything else", args[0], args[1], got)
	case err != nil:
		ts.Fatalf("%s: %v", args[0], err)
	case got != args[2]:
		ts.Fatalf("%s: %s is %q, want %q", args[0], args[1], got, args[2])
	}
}

// cmdJSONEnv stores one value of a JSON document in an environment
// variable, for comparing values across commands:
//
//	jsonenv TREE stdout tree_digest
func cmdJSONEnv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: jsonenv VAR FILE PATH")
	}
	v, err := jsonLookup(ts.ReadFile(args[1]), args[2])
	if err != nil {
		ts.Fatalf("%s: %v", args[1], err)
	}
	ts.Setenv(args[0], v)
}

func jsonLookup(doc, path string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("not JSON: %v", err)
	}
	var walked []string
	for _, key := range strings.Split(path, ".") {
		at := orTop(strings.Join(walked, "."))
		switch x := v.(type) {
		case map[string]any:
			val, ok := x[key]
			switch {
			case key == "@len":
				v = json.Number(strconv.Itoa(len(x)))
			case !ok:
				return "", fmt.Errorf("%s has no key %q", at, key)
			default:
				v = val
			}
		case []any:
			i, err := strconv.Atoi(key)
			switch {
			case key == "@len":
				v = json.Number(strconv.Itoa(len(x)))
			case err != nil || i < 0 || i >= len(x):
				return "", fmt.Errorf("%s has %d elements, no [%s]", at, len(x), key)
			default:
				v = x[i]
			}
		default:
			return "", fmt.Errorf("%s is %v, not an object or array", at, x)
		}
		walked = append(walked, key)
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}

func orTop(path string) string {
	if path == "" {
		return "the document"
	}
	return path
}

// magicNumbers are the leading bytes of the overlay compressions.
var magicNumbers = map[string][]byte{
	"xz":   {0xfd, '7', 'z', 'X', 'Z', 0x00},
	"gzip": {0x1f, 0x8b},
	"zstd": {0x28, 0xb5, 0x2f, 0xfd},
}

// cmdMagic checks the compression format of a file by its magic bytes:
//
//	magic repo/overlays/demo-1.0.1.overlay.tar.xz xz
func cmdMagic(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: magic FILE xz|gzip|zstd")
	}
	want, ok := magicNumbers[args[1]]
	if !ok {
		ts.Fatalf("magic: unknown format %q", args[1])
	}
	b, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	if has := bytes.HasPrefix(b, want); has == neg {
		ts.Fatalf("%s: starts with % x; %s magic is % x (negated: %v)", args[0], b[:min(len(b), 8)], args[1], want, neg)
	}
}
