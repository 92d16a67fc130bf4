// Package tree treats a file tree as an ordered stream of entries: it scans
// directories into manifests.Entry lists, folds layers (overlays) onto a
// base tree lazily (Fold, in the manner of go-containerregistry's
// mutate.Append) and streams the merged tree as tar, writes deterministic
// tar streams and reads tar streams back with every path, type and size
// checked. Images, overlays and node audits all go through it, so one set
// of rules governs them all.
package tree
