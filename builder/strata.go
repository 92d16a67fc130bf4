package builder

import (
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Where a recipe's strata key puts the binary and its units.
const (
	StrataBinaryPath = "usr/bin/strata"
	strataUnitDir    = "usr/lib/systemd/system"
)

// strataUnits are the units baked in with the binary. strata-verify
// audits the node at boot and daily; it does nothing on a machine that
// was never provisioned (no ledger). strata-agent is enabled but starts
// only once /etc/strata/agent.yaml exists (an overlay can ship it).
// strata-upgrade-confirm runs only on a boot with a counted boot loader
// entry (systemd-bless-boot pulls in boot-complete.target, which requires
// it): on the trial boot of a staged upgrade it commits the upgrade once
// the node is healthy, and it reboots the node when it is not, never gets
// there, or runs an image its ledger does not name, so that the entry
// uses up a try (docs/nodes.md).
var strataUnits = map[string]string{
	"strata-agent.service": `[Unit]
Description=strata: pull agent (follows the line's repository, see /etc/strata/agent.yaml)
ConditionPathExists=/var/lib/strata/ledger.json
ConditionPathExists=/etc/strata/agent.yaml
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/strata agent --root /
Restart=always
RestartSec=10s

[Install]
WantedBy=multi-user.target
`,
	manifests.ConfirmUnit: `[Unit]
Description=strata: confirm a whole-image upgrade once the node is healthy
ConditionPathExists=/var/lib/strata/ledger.json
After=multi-user.target
Before=boot-complete.target
FailureAction=reboot
JobTimeoutSec=30min
JobTimeoutAction=reboot

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/strata upgrade --confirm --root /
StandardOutput=journal+console
StandardError=journal+console

[Install]
RequiredBy=boot-complete.target
`,
	"strata-verify.service": `[Unit]
Description=strata: audit this node against its image and overlays
ConditionPathExists=/var/lib/strata/ledger.json
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/bin/strata verify-sequence --root /

[Install]
WantedBy=multi-user.target
`,
	"strata-verify.timer": `[Unit]
Description=strata: audit this node daily
ConditionPathExists=/var/lib/strata/ledger.json

[Timer]
OnBootSec=15min
OnUnitActiveSec=1d
RandomizedDelaySec=1h

[Install]
WantedBy=timers.target
`,
}

// strataEnabled are the install symlinks of the units: the audit runs at
// boot and daily, the agent at boot once configured, the upgrade
// confirmation before boot-complete.target.
var strataEnabled = map[string]string{
	manifests.ConfirmUnitLink: "/" + manifests.ConfirmUnitPath,
	"etc/systemd/system/multi-user.target.wants/strata-agent.service":  "/usr/lib/systemd/system/strata-agent.service",
	"etc/systemd/system/multi-user.target.wants/strata-verify.service": "/usr/lib/systemd/system/strata-verify.service",
	"etc/systemd/system/timers.target.wants/strata-verify.timer":       "/usr/lib/systemd/system/strata-verify.timer",
}

// bakeStrata places the strata binary at /usr/bin/strata (0755, root) and
// its units, when the recipe has a strata key. The binary is, in order of
// precedence, WithStrataBinary's, the recipe's strata.binary, or the
// running executable.
func (l *layout) bakeStrata(r *Recipe, s *settings) error {
	if r.Strata == nil {
		return nil
	}
	bin := s.strata
	if bin == "" && r.Strata.Binary != "" {
		bin = r.Path(r.Strata.Binary)
	}
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("strata: finding the running executable: %w", err)
		}
		bin = exe
	}
	sum, n, err := tree.HashFile(bin)
	if err != nil {
		return fmt.Errorf("strata.binary: %w", err)
	}
	e := manifests.Entry{Path: StrataBinaryPath, Type: manifests.TypeFile, Mode: 0755, Size: n, SHA256: sum}
	if err := l.put(e, source{host: bin}); err != nil {
		return fmt.Errorf("strata: %w", err)
	}
	for _, name := range sortedKeys(strataUnits) {
		data := []byte(strataUnits[name])
		if err := l.put(fileEntry(strataUnitDir+"/"+name, data, 0644), source{data: data}); err != nil {
			return fmt.Errorf("strata: %w", err)
		}
	}
	for _, link := range sortedKeys(strataEnabled) {
		e := manifests.Entry{Path: link, Type: manifests.TypeSymlink, Mode: 0777, Target: strataEnabled[link]}
		if err := l.put(e, source{}); err != nil {
			return fmt.Errorf("strata: %w", err)
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
