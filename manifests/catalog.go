package manifests

import "strings"

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
