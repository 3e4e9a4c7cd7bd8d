// Package keyspace names every Redis key and Pub/Sub channel keyhook
// uses: one function per key, each saying the key's Redis type and why
// its hash tag is what it is. The stores (tracking, subscription, auth,
// nodes) build their keys here and nowhere else, so that the whole layout
// of keyhook's data in Redis can be read, and reviewed for Redis Cluster,
// in one file.
//
// Redis Cluster places a key by the CRC16 of its hash tag: the part
// between the first '{' and the next '}', or the whole name without one.
// A Lua script may only touch keys of one slot, so every key a script
// touches together carries the same tag, while keys never touched
// together carry different ones and spread over the cluster.
//
// The package knows key names only: not what the stores keep in them,
// nor how they decode it.
package keyspace
