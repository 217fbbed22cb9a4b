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
// for one engine. Times are Unix milliseconds.
type RegistrySQL struct {
	// Join inserts an instance: $1 id, $2 service, $3 version, $4 host,
	// $5 pid, $6 started, $7 heartbeat, $8 every_ms.
	Join string
	// JoinSub inserts one subscription of an instance: $1 instance,
	// $2 position, $3 name, $4 table, $5 group, $6 form, $7 workers,
	// $8 lease_ms, $9 roles (JSON).
	JoinSub string
	// Beat is the heartbeat, one statement: it moves instance $2's
	// heartbeat to $1 and returns the paused queues as a JSON array of
	// [table, group] pairs. No row back means the instance's row is gone.
	Beat string
	// Leave and LeaveSubs delete instance $1 and its subscriptions.
	Leave, LeaveSubs string
	// Forget deletes instances whose heartbeat is older than $1, and
	// ForgetSubs the subscriptions of instances no longer present.
	Forget, ForgetSubs string
	// AddMinute adds counts to a queue's minute: $1 table, $2 group,
	// $3 minute, $4 outcome, $5 handled, $6 total_us, $7 max_us.
	AddMinute string
	// Prune deletes minutes before $1.
	Prune string
	// Pause marks queue ($1 table, $2 group) paused at $3; Resume unmarks it.
	Pause, Resume string
	// Paused lists the paused queues: table, group, paused_at.
	Paused string
	// Instances lists instances: id, service, version, host, pid, started,
	// heartbeat, every_ms.
	Instances string
	// Subscriptions lists every subscription: instance, position, name,
	// table, group, form, workers, lease_ms, roles.
	Subscriptions string
	// Minutes lists a queue's minutes from $3 on: minute, outcome, handled,
	// total_us, max_us; $1 table, $2 group.
	Minutes string
	// Notify announces a pause or resume ($1 the channel); Postgres only.
	Notify string
}

// Registry writes the registry's statements.
func (d *Dialect) Registry() RegistrySQL {
	paused := "COALESCE((SELECT json_agg(json_build_array(table_name, group_name))::text FROM " + RegistryPaused + "), '[]')"
	greatest := "GREATEST"
	if d.Kind == SQLite {
		paused = "(SELECT json_group_array(json_array(table_name, group_name)) FROM " + RegistryPaused + ")"
		greatest = "max"
	}
	s := RegistrySQL{
		Join: "INSERT INTO " + RegistryInstances + " (id, service, version, host, pid, started_at, heartbeat_at, every_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
		JoinSub: "INSERT INTO " + RegistrySubscriptions + " (instance, position, name, table_name, group_name, form, workers, lease_ms, roles) " +
			"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		Beat:       "UPDATE " + RegistryInstances + " SET heartbeat_at = $1 WHERE id = $2 RETURNING " + paused,
		Leave:      "DELETE FROM " + RegistryInstances + " WHERE id = $1",
		LeaveSubs:  "DELETE FROM " + RegistrySubscriptions + " WHERE instance = $1",
		Forget:     "DELETE FROM " + RegistryInstances + " WHERE heartbeat_at < $1",
		ForgetSubs: "DELETE FROM " + RegistrySubscriptions + " WHERE instance NOT IN (SELECT id FROM " + RegistryInstances + ")",
		AddMinute: "INSERT INTO " + RegistryMinutes + " AS m (table_name, group_name, minute, outcome, handled, total_us, max_us) VALUES ($1, $2, $3, $4, $5, $6, $7) " +
			"ON CONFLICT (table_name, group_name, minute, outcome) DO UPDATE SET handled = m.handled + excluded.handled, " +
			"total_us = m.total_us + excluded.total_us, max_us = " + greatest + "(m.max_us, excluded.max_us)",
		Prune:  "DELETE FROM " + RegistryMinutes + " WHERE minute < $1",
		Pause:  "INSERT INTO " + RegistryPaused + " (table_name, group_name, paused_at) VALUES ($1, $2, $3) ON CONFLICT (table_name, group_name) DO NOTHING",
		Resume: "DELETE FROM " + RegistryPaused + " WHERE table_name = $1 AND group_name = $2",
		Paused: "SELECT table_name, group_name, paused_at FROM " + RegistryPaused + " ORDER BY table_name, group_name",
		Instances: "SELECT id, service, version, host, pid, started_at, heartbeat_at, every_ms FROM " + RegistryInstances +
			" ORDER BY service, started_at, id",
		Subscriptions: "SELECT instance, position, name, table_name, group_name, form, workers, lease_ms, roles FROM " + RegistrySubscriptions +
			" ORDER BY instance, position",
		Minutes: "SELECT minute, outcome, handled, total_us, max_us FROM " + RegistryMinutes +
			" WHERE table_name = $1 AND group_name = $2 AND minute >= $3 ORDER BY minute, outcome",
		Notify: "SELECT pg_notify($1, '')",
	}
	for _, p := range []*string{&s.Join, &s.JoinSub, &s.Beat, &s.Leave, &s.LeaveSubs, &s.Forget, &s.ForgetSubs, &s.AddMinute, &s.Prune,
		&s.Pause, &s.Resume, &s.Paused, &s.Instances, &s.Subscriptions, &s.Minutes} {
		*p = d.Rebind(*p)
	}
	return s
}
