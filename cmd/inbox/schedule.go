package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/schedule"
)

func init() { builders = append(builders, addScheduleCommands) }

// addScheduleCommands adds "schedule set-placement" and "schedule
// reset-placement".
func addScheduleCommands(root *cobra.Command) {
	parent := &cobra.Command{Use: "schedule", Short: "place a schedule otherwise than its code does, or as its code does again",
		GroupID: "operate", Args: cobra.NoArgs}
	var name, placement string
	set, _ := operatorCommand("set-placement", "run a schedule on one instance, every instance or every worker, over its code's placement",
		`Sets the placement of a schedule (package schedule) over the one its code gives: one
(one instance a moment), every-instance, or every-worker. Every instance that runs the
schedule takes it from the schedule's next moment on, until reset-placement. The
setting is kept in the registry's tables (migrate-registry makes them); the dashboard's
schedules page shows it.`, onDatabase,
		func(ctx context.Context, s *opSession) error {
			p, err := schedule.ParsePlacement(placement)
			if err != nil {
				return err
			}
			if err := schedule.SetPlacement(ctx, s.b.DB(), name, p); err != nil {
				return err
			}
			return s.emit(map[string]any{"schedule": name, "placement": p.String(), "overridden": true}, func(w io.Writer) {
				fmt.Fprintf(w, "schedule %s runs %s from its next moment on (reset-placement gives it its code's placement back)\n", name, p)
			})
		})
	set.Flags().StringVar(&name, "schedule", "", "the schedule's name (required)")
	set.Flags().StringVar(&placement, "placement", "", "one, every-instance or every-worker (required)")
	_ = set.MarkFlagRequired("schedule")
	_ = set.MarkFlagRequired("placement")
	parent.AddCommand(set)

	var resetName string
	reset, _ := operatorCommand("reset-placement", "run a schedule as its code places it again",
		"Removes the placement set-placement gave a schedule: from its next moment on, every\ninstance runs it as its code places it.", onDatabase,
		func(ctx context.Context, s *opSession) error {
			had, err := schedule.ResetPlacement(ctx, s.b.DB(), resetName)
			if err != nil {
				return err
			}
			return s.emit(map[string]any{"schedule": resetName, "overridden": false, "was_overridden": had}, func(w io.Writer) {
				if had {
					fmt.Fprintf(w, "schedule %s runs as its code places it from its next moment on\n", resetName)
				} else {
					fmt.Fprintf(w, "schedule %s had no placement set: it runs as its code places it\n", resetName)
				}
			})
		})
	reset.Flags().StringVar(&resetName, "schedule", "", "the schedule's name (required)")
	_ = reset.MarkFlagRequired("schedule")
	parent.AddCommand(reset)
	root.AddCommand(parent)
}
