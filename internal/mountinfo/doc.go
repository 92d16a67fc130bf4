// Package mountinfo reads the kernel's mount table
// (/proc/thread-self/mountinfo, proc(5)): one parser for every package that
// needs to know what is mounted where. A thread can have a mount namespace
// of its own (a private namespace unshared on a locked thread), so the
// table read is the calling thread's.
package mountinfo
