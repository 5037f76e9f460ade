//! Per-client sessions: sequence numbers, pending queues with flow control, replay
//! rejection, and round-robin batch selection (reference §1.6).
//!
//! TO BE COMPLETED (helper).
