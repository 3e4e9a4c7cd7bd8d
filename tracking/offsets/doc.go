// Package offsets holds the pure offset-range arithmetic behind keyhook's
// out-of-order acknowledgement: a Set of int64 offsets kept as sorted,
// disjoint, non-adjacent half-open ranges, the watermark computed over it,
// and a compact binary encoding of it.
//
// A partition worker adds one offset per acked record, trims the set as the
// watermark (the lowest offset not acked) moves up, and hands the set to the
// tracking store, which writes its encoding to Redis. Gaps in a partition's
// offsets (transaction markers, compacted or aborted records) are added to
// the set by the owner like acked records, so the watermark is simply the
// lowest offset at or above the committed base that the set does not hold.
//
// The package owns only that arithmetic and its encoding. It must not know
// about Redis, Kafka, HTTP or clocks, so that it can be unit- and fuzz-tested
// alone and reused by any component that needs offset ranges.
package offsets
