// viz/ring_example.h: the seed article's worked examples, run through the real ring.
//
// `ringzero comm-trace --example` and `--follow-chunk K` print these. Both drive
// comm/ring/ring.cpp on thread ranks and read what happened through its public RingObserver
// (the schedule: who sends which chunk in which round, and what the receiver then holds),
// so they show what the code does, not a second description of it.
#pragma once

#include <cstdio>
#include <string>

namespace rz {

// The article's two ranks holding [1, 2, 3, 4] and [5, 6, 7, 8], through AllGather,
// ReduceScatter and AllReduce: every rank's buffer before the first and after every round.
void print_article_example(FILE* out);

// Chunk k's path around a ring of N ranks for op ("reduce_scatter", "all_reduce" or
// "all_gather"), round by round. Throws naming --follow-chunk when k is not in 0..N-1.
void print_chunk_path(FILE* out, const std::string& op, int nranks, int chunk);

// Why ringzero's ReduceScatter ends with chunk r on rank r where the article's table ends
// with chunk r+1 on rank r (printed by comm-trace and written in docs/comm.md).
const char* chunk_ownership_note();

}  // namespace rz
