package main

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
)

// doctorCommand checks a project's keys on demand: the claim and done
// scripts trust the types their package set, so a key written from
// outside (redis-cli, a restore gone wrong) is found here.
func doctorCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor <slug>",
		Short: "Check that every key of a project has the type the scripts expect (they do not check on every call)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var report queues.DoctorReport
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/projects/"+args[0]+"/doctor", nil, &report); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, p := range report.Problems {
				fmt.Fprintf(w, "%s %s\n", p.Key, p.Problem)
			}
			if len(report.Problems) > 0 {
				return fmt.Errorf("%d problem(s) in %d keys of %s: claims refuse (and undo their pops) while a key they reach has the wrong type; repair or delete it", len(report.Problems), report.KeysChecked, report.Project)
			}
			fmt.Fprintf(w, "%s: %d keys checked, no problems\n", report.Project, report.KeysChecked)
			return nil
		},
	}
}
