// Package pluginhost runs and supervises hoard's plugins inside `hoard
// serve`: the host side of the contract in package plugins, with the queue
// engine adapter (EngineQueues, EngineEventLog), the event-log readers,
// the plugins' HostAPI, leases and metrics.
//
// For each configured plugin (--plugin NAME=PATH, HOARD_PLUGINS; settings
// with --plugin-settings NAME=@FILE) the host:
//
//  1. starts it (its binary, or its Factory), then calls Configure and
//     Describe, and creates the projects of its item types if missing;
//  2. ticks each described job at its period (OnTick), under a Redis lease
//     so one frontend runs each period, and queues the items the tick
//     returns into the plugin's projects;
//  3. delivers OnItemDone for completions of the plugin's items and
//     OnReclaim for its items whose claim expired, from each project's
//     event log (a capped Redis stream the queue scripts write in the same
//     step as the change), through one consumer group per plugin: each
//     event is handled by one frontend, acknowledged only once its hook
//     returned nil, taken over by another frontend when its reader died,
//     and delivered after downtime (events.go);
//  4. pings it and calls Health every HealthInterval, caching Stats for
//     /metrics and the leaderboard;
//  5. restarts it, with a back-off doubling up to MaxBackoff, when its
//     process exits, an in-process call panics, or it fails HealthFailures
//     health checks in a row; its log lines and output go to hoard's log
//     with plugin=NAME;
//  6. on Stop, calls Close and kills what is left after the grace period.
//
// A crashed, slow or hung plugin never blocks hoard: every call has a
// deadline and returns when it passes (the goroutine left behind is bounded
// by MaxInflight, after which calls fail fast with ErrBusy); events handed to
// Deliver* go through a bounded per-plugin backlog and are dropped and
// counted when it is full (events from the event logs wait in Redis); ticks missed while a plugin is down are not replayed in a burst,
// the next run says how many it stands for (Tick.Missed).
package pluginhost
