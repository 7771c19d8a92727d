package main

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/queues"
)

// doctorCommand checks a project's keys on demand: the claim and done
// scripts trust the types their package set, so a key written from
// outside (redis-cli, a restore gone wrong) is found here. With
// --functions it prunes Redis's function libraries instead.
func doctorCommand() *cobra.Command {
	var functions bool
	cmd := &cobra.Command{
		Use:   "doctor <slug> | doctor --functions",
		Short: "Check that every key of a project has the type the scripts expect (they do not check on every call), or prune stale function libraries",
		Long: `doctor <slug> checks that every key of the project has the type the scripts expect.

doctor --functions (admins only) deletes, on every Redis master, every
function library named hoard_* except those of the server it asks: each
hoard build's scripts are new libraries, and the old ones stay in Redis
until deleted. A process still running another build (a rolling upgrade,
a plugin process) loads its own again at its next call, which runs once.
Libraries of other names are never touched.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if functions {
				if len(args) != 0 {
					return errors.New("doctor --functions takes no project")
				}
				return pruneFunctions(cmd)
			}
			if len(args) != 1 {
				return errors.New("doctor needs a project's slug (or --functions)")
			}
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
	cmd.Flags().BoolVar(&functions, "functions", false, "delete every hoard_* function library the server does not run (admins only)")
	return cmd
}

// pruneFunctions asks the server to prune (POST /functions/prune) and
// lists what it deleted.
func pruneFunctions(cmd *cobra.Command) error {
	var report luascript.PruneReport
	if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/functions/prune", nil, &report); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	for _, name := range report.Deleted {
		fmt.Fprintf(w, "deleted %s\n", name)
	}
	fmt.Fprintf(w, "%d function libraries deleted, %d kept (the server's own)\n", len(report.Deleted), len(report.Kept))
	return nil
}
