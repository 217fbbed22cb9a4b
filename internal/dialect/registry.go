package dialect

// The registry's tables, created by migrations.ApplyRegistry.
const (
	RegistryInstances     = "sqlinbox_instances"
	RegistrySubscriptions = "sqlinbox_subscriptions"
	RegistryMinutes       = "sqlinbox_queue_minutes"
	RegistryPaused        = "sqlinbox_paused"
	// PauseChannel is the NOTIFY channel (and hub channel) a pause or a
	// resume is announced on: registries refresh their paused set at once.
	PauseChannel = "sqlinbox_pause"
)

// RegistrySQL is every statement of the registry, written once and rebound
// for one engine. Each is a type whose Call takes its parameters by name
// and type (registryargs.go).
type RegistrySQL struct {
	// Join inserts an instance.
	Join JoinSQL
	// JoinSub inserts one subscription of an instance.
	JoinSub JoinSubSQL
	// Beat is the heartbeat, one statement: it moves the instance's
	// heartbeat and returns the paused queues as a JSON array of [table,
	// group] pairs. No row back means the instance's row is gone.
	Beat BeatSQL
	// Leave and LeaveSubs delete an instance and its subscriptions.
	Leave, LeaveSubs InstanceSQL
	// Forget deletes instances whose heartbeat is older than a time.
	Forget BeforeSQL
	// ForgetSubs deletes the subscriptions of instances no longer present.
	ForgetSubs PlainSQL
	// AddMinute adds counts to a queue's minute.
	AddMinute AddMinuteSQL
	// Prune deletes minutes before a time.
	Prune BeforeSQL
	// Pause marks a queue paused; Resume unmarks it.
	Pause  PauseSQL
	Resume QueueSQL
	// Paused lists the paused queues: table, group, paused_at.
	Paused PlainSQL
	// Instances lists instances: id, service, version, host, pid, started,
	// heartbeat, every_ms.
	Instances PlainSQL
	// Subscriptions lists every subscription: instance, position, name,
	// table, group, form, workers, lease_ms, roles, limit_spec (NULL
	// without a limit).
	Subscriptions PlainSQL
	// Minutes lists a queue's minutes from a time on: minute, outcome,
	// handled, total_us, max_us.
	Minutes MinutesSQL
}

// Registry writes the registry's statements. They are the same on every
// database but for the heartbeat's read of the paused queues, the minutes'
// upsert and the pause's insert (mysqlRegistry).
func (d *Dialect) Registry() RegistrySQL {
	// The placeholders are the order of each statement's Call.
	x := func(sql string) text { return d.text(sql, Times{}) }
	r := RegistrySQL{
		Join: JoinSQL{x("INSERT INTO " + RegistryInstances + " (id, service, version, host, pid, started_at, heartbeat_at, every_ms, pickup_fallback) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)")},
		JoinSub: JoinSubSQL{x("INSERT INTO " + RegistrySubscriptions + " (instance, position, name, table_name, group_name, form, workers, lease_ms, roles, limit_spec) " +
			"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")},
		Leave:      InstanceSQL{x("DELETE FROM " + RegistryInstances + " WHERE id = $1")},
		LeaveSubs:  InstanceSQL{x("DELETE FROM " + RegistrySubscriptions + " WHERE instance = $1")},
		Forget:     BeforeSQL{x("DELETE FROM " + RegistryInstances + " WHERE heartbeat_at < $1")},
		ForgetSubs: PlainSQL{x("DELETE FROM " + RegistrySubscriptions + " WHERE instance NOT IN (SELECT id FROM " + RegistryInstances + ")")},
		Prune:      BeforeSQL{x("DELETE FROM " + RegistryMinutes + " WHERE minute < $1")},
		Resume:     QueueSQL{x("DELETE FROM " + RegistryPaused + " WHERE table_name = $1 AND group_name = $2")},
		Paused:     PlainSQL{x("SELECT table_name, group_name, paused_at FROM " + RegistryPaused + " ORDER BY table_name, group_name")},
		Instances: PlainSQL{x("SELECT id, service, version, host, pid, started_at, heartbeat_at, every_ms, pickup_fallback FROM " + RegistryInstances +
			" ORDER BY service, started_at, id")},
		Subscriptions: PlainSQL{x("SELECT instance, position, name, table_name, group_name, form, workers, lease_ms, roles, limit_spec FROM " + RegistrySubscriptions +
			" ORDER BY instance, position")},
		Minutes: MinutesSQL{x("SELECT minute, outcome, handled, total_us, max_us FROM " + RegistryMinutes +
			" WHERE table_name = $1 AND group_name = $2 AND minute >= $3 ORDER BY minute, outcome")},
	}
	if d.Kind == MySQL {
		d.mysqlRegistry(&r, x)
		return r
	}
	paused := "COALESCE((SELECT json_agg(json_build_array(table_name, group_name))::text FROM " + RegistryPaused + "), '[]')"
	greatest := "GREATEST"
	if d.Kind == SQLite {
		paused = "(SELECT json_group_array(json_array(table_name, group_name)) FROM " + RegistryPaused + ")"
		greatest = "max"
	}
	r.Beat = BeatSQL{text: x("UPDATE " + RegistryInstances + " SET heartbeat_at = $1 WHERE id = $2 RETURNING " + paused)}
	r.AddMinute = AddMinuteSQL{x("INSERT INTO " + RegistryMinutes + " AS m (table_name, group_name, minute, outcome, handled, total_us, max_us) VALUES ($1, $2, $3, $4, $5, $6, $7) " +
		"ON CONFLICT (table_name, group_name, minute, outcome) DO UPDATE SET handled = m.handled + excluded.handled, " +
		"total_us = m.total_us + excluded.total_us, max_us = " + greatest + "(m.max_us, excluded.max_us)")}
	r.Pause = PauseSQL{x("INSERT INTO " + RegistryPaused + " (table_name, group_name, paused_at) VALUES ($1, $2, $3) ON CONFLICT (table_name, group_name) DO NOTHING")}
	return r
}

// mysqlRegistry writes the statements that differ on MariaDB and MySQL: no
// UPDATE ... RETURNING (the heartbeat is its update, then BeatSQL.Then reads
// the paused queues), no ON CONFLICT (ON DUPLICATE KEY UPDATE and INSERT
// IGNORE).
func (d *Dialect) mysqlRegistry(r *RegistrySQL, x func(string) text) {
	r.Beat = BeatSQL{text: x("UPDATE " + RegistryInstances + " SET heartbeat_at = $1 WHERE id = $2")}
	r.Beat.then = x("SELECT COALESCE(JSON_ARRAYAGG(JSON_ARRAY(table_name, group_name)), '[]') FROM " + RegistryPaused)
	// VALUES(col): the row the insert proposed (MariaDB and MySQL 8, which
	// warns of it).
	r.AddMinute = AddMinuteSQL{x("INSERT INTO " + RegistryMinutes + " (table_name, group_name, minute, outcome, handled, total_us, max_us) VALUES ($1, $2, $3, $4, $5, $6, $7) " +
		"ON DUPLICATE KEY UPDATE handled = handled + VALUES(handled), total_us = total_us + VALUES(total_us), max_us = GREATEST(max_us, VALUES(max_us))")}
	r.Pause = PauseSQL{x("INSERT IGNORE INTO " + RegistryPaused + " (table_name, group_name, paused_at) VALUES ($1, $2, $3)")}
}
