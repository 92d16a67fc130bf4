package systemd

import "errors"

// Sentinel errors. Callers test for them with errors.Is.
var (
	// ErrAction reports a unit operation that failed; Run's error names
	// the verb, the unit and systemctl's output.
	ErrAction = errors.New("unit action failed")
	// ErrInvalidUnit reports a unit name that manifests.ValidUnit rejects;
	// such a name never reaches a command line.
	ErrInvalidUnit = errors.New("invalid unit name")
	// ErrUnknownVerb reports a Verb that is none of the package's.
	ErrUnknownVerb = errors.New("unknown verb")
	// ErrParse reports systemctl output that is not what was asked for.
	ErrParse = errors.New("malformed systemctl output")
	// ErrOutputTooLarge reports systemctl output beyond the output limit.
	ErrOutputTooLarge = errors.New("systemctl output too large")
	// ErrCommand reports systemctl failing to run or exiting non-zero.
	ErrCommand = errors.New("systemctl failed")
)
