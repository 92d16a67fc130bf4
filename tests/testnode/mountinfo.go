package testnode

import "github.com/strata-dev/strata/internal/mountinfo"

// readMountinfo parses a mountinfo file (proc(5)).
func readMountinfo(path string) ([]mountinfo.Mount, error) { return mountinfo.ReadFile(path) }
