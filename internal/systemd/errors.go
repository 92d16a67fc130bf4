package systemd

import "errors"

// Sentinel errors. Callers test for them with errors.Is.
var (
	// ErrAction reports a unit operation that failed; Run's error names
	// the verb, the unit and systemctl's output.
	ErrAction = errors.New("systemd: unit action failed")
	// ErrInvalidUnit reports a unit name that manifests.ValidUnit rejects;
	// such a name never reaches a command line.
	ErrInvalidUnit = errors.New("systemd: invalid unit name")
	// ErrUnknownVerb reports a Verb that is none of the package's.
	ErrUnknownVerb = errors.New("systemd: unknown verb")
	// ErrParse reports systemctl output that is not what was asked for.
	ErrParse = errors.New("systemd: malformed systemctl output")
	// ErrOutputTooLarge reports systemctl output beyond the output limit.
	ErrOutputTooLarge = errors.New("systemd: systemctl output too large")
	// ErrCommand reports systemctl failing to run or exiting non-zero.
	ErrCommand = errors.New("systemd: systemctl failed")
)
