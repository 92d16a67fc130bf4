// Package configset reads a unit's config set: the files its catalog
// entry claims as configuration (unit files, declared paths and reload
// paths), as the node's expected tree has them and as they are on disk,
// with each file's change time. A file's content is hashed again only
// when its inode, size or times change, so reading every unit's set on
// each health request or metrics scrape costs a few stat calls.
package configset
