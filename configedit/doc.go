// Package configedit is the central configuration workflow on a
// repository: read a file as of any version of a line, show what changed
// between two versions and which services each change touches, and
// publish edited files as the line's next overlay after checking them:
// their syntax for the formats it knows (JSON, YAML, TOML, systemd unit
// files) and, for a file a service with a validation command claims, that
// command run against the line's head tree with the edit in place.
//
// The repository's head is the one source of truth: an edit starts from
// the head and is published as its successor, and publishing refuses
// when the head moved since the edit started (overlay.ErrHeadMoved), so
// two operators' edits can never silently overwrite each other.
package configedit
