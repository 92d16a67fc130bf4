package manifests

// Action is what a service needs after its files change.
type Action string

// The actions of a restart plan.
const (
	ActionRestart      Action = "restart"
	ActionReload       Action = "reload"
	ActionDaemonReload Action = "daemon-reload"
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
