// Package faults proves keyhook's guarantees under failure: real keyhook
// processes killed with signals, a real redis-server restarted, and (in the
// integration tier) a real Apache Kafka broker restarted, while a real HTTP
// sink records every delivery. It has no code of its own, only tests.
package faults
