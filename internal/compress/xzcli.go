package compress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"

	"github.com/ulikunitz/xz"
)

// xzArgs are the xz(1) settings strata writes with: preset 6 (an 8 MiB
// dictionary, as the Go encoder's), one thread (its output does not
// depend on the machine), CRC64 (the Go encoder's check).
var xzArgs = []string{"--compress", "--stdout", "--quiet", "--format=xz", "--check=crc64", "-6", "--threads=1"}

// xzTool is the xz command NewWriter runs, "" when there is none that
// works (probed once: a command that does not answer --version as XZ
// Utils 5 is not used).
var xzTool = sync.OnceValue(func() string { return probeXz("xz") })

func probeXz(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	cmd := exec.Command(p, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil || !bytes.HasPrefix(out, []byte("xz (XZ Utils) 5.")) {
		return ""
	}
	return p
}

// newXzWriter compresses into w with the xz command at tool, or with the
// pure-Go encoder when tool is "". xz(1) runs several times faster
// (issue 24: 0.44 MB/s for the Go encoder on incompressible data), and
// on its own core beside the archive's writer. Both write a valid xz
// stream of the same content; the bytes differ between the two, and a
// given one writes the same bytes for the same input.
func newXzWriter(w io.Writer, tool string) (io.WriteCloser, error) {
	if tool == "" {
		return xz.NewWriter(w)
	}
	cmd := exec.Command(tool, xzArgs...)
	// XZ_OPT and XZ_DEFAULTS would change the preset or the threads.
	cmd.Env = []string{}
	cmd.Stdout = w
	var stderr tailBuffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", tool, err)
	}
	return &xzCmd{cmd: cmd, in: in, stderr: &stderr}, nil
}

// xzCmd is a running xz(1) fed through its standard input.
type xzCmd struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	stderr *tailBuffer
	done   bool
	err    error
}

func (x *xzCmd) Write(p []byte) (int, error) {
	if x.done {
		return 0, x.failed(errors.New("write after close"))
	}
	n, err := x.in.Write(p)
	if err != nil {
		// xz is gone: say why, from its exit and its own words.
		return n, x.failed(x.wait())
	}
	return n, nil
}

// Close ends xz's input and waits for it to write the rest of the stream.
func (x *xzCmd) Close() error {
	if x.done {
		return x.err
	}
	return x.failed(x.wait())
}

func (x *xzCmd) wait() error {
	x.done = true
	cerr := x.in.Close()
	if err := x.cmd.Wait(); err != nil {
		if msg := strings.TrimSpace(x.stderr.String()); msg != "" {
			return fmt.Errorf("%s: %w: %s", x.cmd.Path, err, msg)
		}
		return fmt.Errorf("%s: %w", x.cmd.Path, err)
	}
	return cerr
}

func (x *xzCmd) failed(err error) error {
	if x.err == nil && err != nil {
		x.err = fmt.Errorf("compressing with xz: %w", err)
	}
	return x.err
}

// tailBuffer keeps the last 4 KiB written to it: enough of a tool's
// complaint to name the problem, whatever it writes.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - 4096; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }
