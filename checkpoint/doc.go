// Package checkpoint translates consumer-group offsets of one replication
// flow from the source cluster to the target cluster, the job of MM2's
// MirrorCheckpointConnector, exactly instead of approximately.
//
// It owns:
//
//   - the in-memory translation Index, fed from mm2go's offset map topic
//     (offsetmap.Topic) that the replicator writes on the target;
//   - checkpoint emission: every emit.checkpoints.interval.seconds, the
//     committed source offsets of the groups the flow selects (groups /
//     groups.exclude, and only groups with a committed offset on a topic the
//     flow replicates) are translated and written as MM2 Checkpoint records
//     to <source>.checkpoints.internal on the target, never moving backwards
//     unless the source group itself rewound (MM2's rule);
//   - group-offset sync (sync.group.offsets.enabled): the checkpointed
//     offsets are committed into the target's consumer groups, only for
//     groups without members, never rewinding an offset the target already
//     has;
//   - the functions behind mm2go's failover commands: LoadIndex, Translate,
//     Apply and Check.
//
// # Exactness
//
// A committed offset U means "the next record to read is U". The Index maps
// it to the position right after the downstream copy of the last replicated
// record before U, so a consumer switched to the target reads neither a
// record twice nor skips one (see Mode). Checkpoints are skipped, as MM2
// skips them, for partitions the index knows nothing about; an empty source
// partition still translates once the replicator has stored a position for
// it, so a group that committed 0 there gets a checkpoint of 0.
//
// # Races with consumers on the target
//
// Offsets are committed with the admin form of OffsetCommit (no member,
// generation -1), which the broker refuses for a group that has members, so
// a consumer that joins between the describe and the commit makes the
// commit fail instead of being rewound. Such a refusal (UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION, STALE_MEMBER_EPOCH, REBALANCE_IN_PROGRESS, ...) is
// logged at info level, counted as skipped with reason "became_active" and
// not retried: the next sync describes the group afresh. After a successful
// commit the group is described again and a member that joined meanwhile is
// reported (warn log, mm2go_checkpoint_errors_total{reason="member_joined"}).
// What remains is the window of one OffsetFetch and OffsetCommit round trip
// in which a consumer would have to join, commit and leave again for the
// commit to land behind it.
//
// # Local topics (mm2go extension)
//
// With the default replication policy, a consumer that fails over usually
// reads two topics on the target: the remote topic "<source>.<topic>",
// where the checkpoint puts it, and the local topic "<topic>", where its
// producers write after they were switched. A consumer with
// auto.offset.reset=none fails on a partition without a committed offset, so
// when InitLocalTopics is set (Options, ApplyOptions) and a group has a
// checkpoint for "<source>.<topic>", the target has a topic "<topic>" and the
// group has no committed offset on any of its partitions, the group's offset
// for every partition of "<topic>" is set to the partition's log-start
// offset. This happens once: afterwards the group has offsets on the topic
// and they are never touched again. If retention later removes records
// before such an offset, the consumer sees an out-of-range offset, as it
// would on any idle group.
//
// The package does not create or close clients (the caller owns them), does
// not copy records or write the offset map (package replicator), and does
// not emit heartbeats (package heartbeat).
package checkpoint
