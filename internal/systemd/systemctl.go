package systemd

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// DefaultOutputLimit bounds what Systemctl reads of one systemctl run.
const DefaultOutputLimit = 16 << 20

// errorOutputLimit bounds the systemctl output an error carries.
const errorOutputLimit = 4 << 10

// showBatch is how many units one `systemctl show` names.
const showBatch = 256

// Systemctl talks to a systemd service manager by running systemctl with
// an argument vector, never through a shell. Every unit name is checked
// with manifests.ValidUnit and follows "--" on the command line.
type Systemctl struct {
	argv  []string
	limit int
}

var (
	_ Manager    = (*Systemctl)(nil)
	_ Controller = (*Systemctl)(nil)
)

// Option configures a Systemctl.
type Option func(*Systemctl)

// WithCommand sets the argument vector that runs systemctl; the default is
// {"systemctl"}. Use it to reach another manager, for example
// {"nsenter", "-t", pid, "-m", "-p", "-r", "-w", "--", "systemctl"} or
// {"systemctl", "--machine=node1"}. Systemctl appends its own arguments.
func WithCommand(argv ...string) Option {
	return func(s *Systemctl) { s.argv = append([]string(nil), argv...) }
}

// WithOutputLimit bounds the bytes read from one systemctl run (default
// DefaultOutputLimit); more is ErrOutputTooLarge.
func WithOutputLimit(n int) Option {
	return func(s *Systemctl) { s.limit = n }
}

// NewSystemctl returns a Systemctl configured by opts.
func NewSystemctl(opts ...Option) *Systemctl {
	s := &Systemctl{argv: []string{"systemctl"}, limit: DefaultOutputLimit}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Units lists the loaded units (`systemctl list-units --all`) and returns
// their properties (`systemctl show`).
func (s *Systemctl) Units(ctx context.Context) ([]Unit, error) {
	out, err := s.output(ctx, "list-units", "--all", "--plain", "--no-legend", "--full", "--no-pager")
	if err != nil {
		return nil, fmt.Errorf("listing units: %w", err)
	}
	return s.Show(ctx, parseListUnits(out)...)
}

// Show returns the properties of the named units, in systemctl's order.
// A name no unit has comes back with LoadState "not-found"; an alias
// comes back as its unit.
func (s *Systemctl) Show(ctx context.Context, names ...string) ([]Unit, error) {
	for _, n := range names {
		if !manifests.ValidUnit(n) {
			return nil, fmt.Errorf("showing unit %q: %w", n, ErrInvalidUnit)
		}
	}
	var units []Unit
	for len(names) > 0 {
		batch := names[:min(len(names), showBatch)]
		names = names[len(batch):]
		args := append([]string{"show", "--no-pager", "-p", showProperties, "--"}, batch...)
		out, err := s.output(ctx, args...)
		if err != nil {
			return nil, fmt.Errorf("showing units %s...: %w", batch[0], err)
		}
		us, err := parseShow(out)
		if err != nil {
			return nil, fmt.Errorf("showing units %s...: %w", batch[0], err)
		}
		units = append(units, us...)
	}
	return units, nil
}

// Do runs `systemctl VERB -- UNIT`, or `systemctl VERB` for the daemon
// verbs. Its error carries systemctl's output, cut to a few KiB.
func (s *Systemctl) Do(ctx context.Context, verb Verb, unit string) error {
	args := []string{"--no-pager", "--no-ask-password", string(verb)}
	switch verb {
	case VerbDaemonReexec, VerbDaemonReload:
		if unit != "" {
			return fmt.Errorf("systemctl %s: %w: takes no unit, got %q", verb, ErrInvalidUnit, unit)
		}
	case VerbTryRestart, VerbTryReloadOrRestart, VerbStop, VerbRestart, VerbReloadOrRestart, VerbResetFailed:
		if !manifests.ValidUnit(unit) {
			return fmt.Errorf("systemctl %s %q: %w", verb, unit, ErrInvalidUnit)
		}
		args = append(args, "--", unit)
	default:
		return fmt.Errorf("systemctl %q: %w", verb, ErrUnknownVerb)
	}
	w := &capWriter{max: errorOutputLimit}
	if err := s.run(ctx, w, w, args); err != nil {
		return fmt.Errorf("%w: %s", err, w.String()) // err names the command line
	}
	return nil
}

// output runs systemctl with args and returns its standard output; the
// error carries its standard error.
func (s *Systemctl) output(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdout := &capWriter{max: s.limit, full: cancel}
	stderr := &capWriter{max: errorOutputLimit}
	err := s.run(ctx, stdout, stderr, args)
	if stdout.over {
		return "", fmt.Errorf("%w: more than %d bytes", ErrOutputTooLarge, s.limit)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

func (s *Systemctl) run(ctx context.Context, stdout, stderr *capWriter, args []string) error {
	argv := append(append([]string(nil), s.argv...), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second // a killed command's children may hold its output open
	if err := cmd.Run(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !stdout.over {
			return fmt.Errorf("%w: %s: %w", ErrCommand, strings.Join(argv, " "), ctxErr)
		}
		return fmt.Errorf("%w: %s: %w", ErrCommand, strings.Join(argv, " "), err)
	}
	return nil
}

// capWriter keeps the first max bytes written to it and discards the rest,
// calling full once when it first overflows.
type capWriter struct {
	mu   sync.Mutex
	buf  []byte
	max  int
	over bool
	full func()
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	room := w.max - len(w.buf)
	if len(p) > room {
		w.buf = append(w.buf, p[:max(room, 0)]...)
		if !w.over && w.full != nil {
			w.full()
		}
		w.over = true
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *capWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.TrimSpace(string(w.buf))
	if w.over {
		s += " [output cut]"
	}
	return s
}
