package manifests

import (
	"fmt"
	"path"
	"strings"
)

// Action is what a service needs after its files change.
type Action string

// The actions of a restart plan.
const (
	ActionRestart      Action = "restart"
	ActionReload       Action = "reload"
	ActionDaemonReload Action = "daemon-reload"
	// ActionStop stops a unit whose unit file an overlay removed.
	ActionStop Action = "stop"
)

// Service is one catalog entry: a systemd unit and every path whose change
// affects it.
type Service struct {
	// Unit is the unit name, for example "nginx.service".
	Unit string `json:"unit"`
	// UnitFiles are the unit file and its drop-ins; a change to one means
	// daemon-reload and restart.
	UnitFiles []string `json:"unit_files"`
	// Binaries are the ExecStart (and ExecStartPre, ExecReload) programs.
	Binaries []string `json:"binaries,omitempty"`
	// Libraries are the shared objects those binaries load (ELF DT_NEEDED,
	// resolved in the tree, transitively).
	Libraries []string `json:"libraries,omitempty"`
	// Paths are declared files or directories whose change restarts the
	// unit.
	Paths []string `json:"paths,omitempty"`
	// ReloadPaths are declared files or directories whose change only
	// reloads the unit.
	ReloadPaths []string `json:"reload_paths,omitempty"`
	// Validate is a command (argv, an absolute program path first) that
	// checks the service's configuration, for example nginx -t. A live
	// node runs it against a changed tree before switching to it and
	// refuses the change if it fails.
	Validate []string `json:"validate,omitempty"`
	// Check is a command that tells whether the running service is
	// healthy; a live node runs it after restarting the service.
	Check []string `json:"check,omitempty"`
}

// Catalog lists the services of a tree, sorted by unit name.
type Catalog struct {
	Services []Service `json:"services"`
}

// ServiceAction is one step of a restart plan: a unit, what to do to it and
// the changed paths that call for it.
type ServiceAction struct {
	Unit   string `json:"unit"`
	Action Action `json:"action"`
	// DaemonReload is set when a unit file of this unit changed: the
	// service manager must re-read its configuration first.
	DaemonReload bool     `json:"daemon_reload,omitempty"`
	Because      []string `json:"because"`
}

// ValidUnit reports whether s is a plausible systemd unit name: 1-255
// characters of [A-Za-z0-9:_.\\@-], not starting with '-' or '.', with a
// unit type suffix such as ".service".
func ValidUnit(s string) bool {
	if len(s) == 0 || len(s) > 255 || s[0] == '-' || s[0] == '.' {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(":_.\\@-", c)
		if !ok {
			return false
		}
	}
	dot := strings.LastIndexByte(s, '.')
	return dot > 0 && dot < len(s)-1
}

// ValidCommand checks a declared command: 1-64 arguments, the first an
// absolute, clean program path, each argument at most 4096 bytes without
// NUL bytes. Commands run as argv, never through a shell.
func ValidCommand(argv []string) error {
	if len(argv) == 0 || len(argv) > 64 {
		return fmt.Errorf("%w: command needs 1-64 arguments, has %d", ErrInvalid, len(argv))
	}
	if p := argv[0]; !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("%w: command program %q must be an absolute, clean path", ErrInvalid, p)
	}
	for i, a := range argv {
		if len(a) > 4096 || strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: command argument %d is longer than 4096 bytes or holds a NUL byte", ErrInvalid, i)
		}
	}
	return nil
}

// Validate checks every service of the catalog: a valid unit name, each
// once, and valid commands.
func (c *Catalog) Validate() error {
	seen := map[string]bool{}
	for _, s := range c.Services {
		if !ValidUnit(s.Unit) {
			return fmt.Errorf("%w: catalog unit name %q", ErrInvalid, s.Unit)
		}
		if seen[s.Unit] {
			return fmt.Errorf("%w: catalog lists unit %s twice", ErrInvalid, s.Unit)
		}
		seen[s.Unit] = true
		for what, cmd := range map[string][]string{"validate": s.Validate, "check": s.Check} {
			if cmd == nil {
				continue
			}
			if err := ValidCommand(cmd); err != nil {
				return fmt.Errorf("catalog unit %s %s: %w", s.Unit, what, err)
			}
		}
	}
	return nil
}
