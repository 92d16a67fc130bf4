package restarter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
)

// UnitShower reads units' properties (systemd.Systemctl's Show).
type UnitShower interface {
	Show(ctx context.Context, names ...string) ([]systemd.Unit, error)
}

// BootHealth is the health check of a trial boot on a node run by
// systemd: no service of the catalog that is enabled may have failed or
// still be starting after settle (a oneshot that ran, or one whose
// condition was not met, is inactive, and fine), and each declared check
// command of an active one must pass, run with root as its root. The
// units in skip (the caller's own) and templates (their instances are not
// in the catalog) are not looked at.
func BootHealth(ctl UnitShower, root string, settle time.Duration, skip ...string) node.HealthCheck {
	return func(ctx context.Context, cat manifests.Catalog) error {
		var names []string
		for _, s := range cat.Services {
			if !slices.Contains(skip, s.Unit) && !systemd.IsTemplate(s.Unit) {
				names = append(names, s.Unit)
			}
		}
		if len(names) == 0 {
			return nil
		}
		deadline := time.Now().Add(settle)
		var active map[string]bool
		for {
			units, err := ctl.Show(ctx, names...)
			if err != nil {
				return err
			}
			var bad, starting []string
			active = map[string]bool{}
			for _, u := range units {
				if u.UnitFileState != "enabled" {
					continue
				}
				switch u.ActiveState {
				case "active":
					active[u.ID] = true
				case "inactive":
				case "failed":
					bad = append(bad, fmt.Sprintf("%s failed (%s)", u.ID, u.SubState))
				default:
					starting = append(starting, fmt.Sprintf("%s is %s (%s)", u.ID, u.ActiveState, u.SubState))
				}
			}
			if len(bad) > 0 {
				return fmt.Errorf("enabled services failed: %s", strings.Join(bad, "; "))
			}
			if len(starting) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("enabled services not up after %s: %s", settle, strings.Join(starting, "; "))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		for _, s := range cat.Services {
			if s.Check == nil || !active[s.Unit] {
				continue
			}
			if out, err := runCommand(ctx, s.Check, checkTimeout, root); err != nil {
				return fmt.Errorf("check of %s: %s: %w: %s", s.Unit, strings.Join(s.Check, " "), err, out)
			}
		}
		return nil
	}
}
