package keyspace

import "strings"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of key, as CLUSTER KEYSLOT
// answers it: the CRC16 (XMODEM) of the key's hash tag (the part between
// the first '{' and the next '}', when not empty), or of the whole key,
// modulo Slots. Keys of one slot may share a script; keys of different
// slots may not, whatever node holds them.
//
// go-redis computes the same slot to route commands but does not export
// it.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}
