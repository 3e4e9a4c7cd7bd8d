// Package keyrange maps record keys onto a fixed hash space and describes
// the parts of that space a node owns.
//
// A partition shared by several nodes is split by key hash: each sharer
// delivers the records whose hash falls in its ranges, so one key is
// always delivered by one node and keeps its order. The hash is stable
// across processes and versions (FNV-1a folded to 16 bits); records
// without a key hash by offset, spreading them evenly.
package keyrange
