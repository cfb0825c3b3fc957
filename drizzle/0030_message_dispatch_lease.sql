-- Issue 37. messages.dispatch_lease_until: while in the future, a live process is dispatching the
-- queued message, and the catch-up of every other process leaves it alone; the catch-up takes a
-- stale message by setting it, so two processes never both call the carrier for one message
-- (src/messages/service.ts, dispatchStaleQueuedMessages; docs/webhooks.md#messages-and-events).
ALTER TABLE "messages" ADD COLUMN "dispatch_lease_until" timestamp with time zone;
