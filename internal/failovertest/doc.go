// Package failovertest holds the failover test: queues of every claim form
// and a lock drained through a switchover and the death of the primary of a
// pg_auto_failover cluster (.ci/failover starts one and sets
// FAILOVER_TEST_URL). It has no code of its own beside the test.
package failovertest
