//! A shard: one tagma client proxy, a batcher thread and a waiter thread.
//!
//! Connections submit entries ([`tagma_kv::redis::Entry`]) with a [`Completion`] each; the
//! batcher takes whatever is queued (up to `bundle_max` entries and the request size limit),
//! sends it as one request — ordered, or unordered for read-only entries when allowed —
//! and passes the reply's future to the waiter, which completes each entry with its reply.
//! Bundles leave in submission order through one proxy, so they execute in that order.
//! The queue is bounded: a full one makes connections wait (back-pressure).

use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, bounded};
use tagma_client::{Proxy, ReplyFuture};
use tagma_kv::redis::{Bundle, Entry};
use tagma_kv::{KvOp, KvReply};
use tagma_wire::RequestKind;

/// The reply to one entry, once it comes: the RESP2 bytes, or why there is none.
#[derive(Default)]
pub struct Completion {
    state: Mutex<Option<Result<Bytes, String>>>,
    ready: Condvar,
}

impl Completion {
    fn complete(&self, result: Result<Bytes, String>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.is_none() {
            *state = Some(result);
            self.ready.notify_all();
        }
    }

    /// Waits for the reply.
    pub fn wait(&self) -> Result<Bytes, String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(result) = state.take() {
                return result;
            }
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

struct Job {
    entry: Entry,
    ordered: bool,
    bytes: usize,
    done: Arc<Completion>,
}

/// A submitted bundle: its reply to come and the entries' completions.
type InFlight = (ReplyFuture, Vec<Arc<Completion>>);

/// One proxy with its batcher and waiter.
pub struct Shard {
    jobs: Sender<Job>,
}

/// Bytes a bundle may hold besides its entries (tags and counts).
const BUNDLE_OVERHEAD: usize = 64;

impl Shard {
    /// Starts shard `index` on `proxy`: bundles of at most `bundle_max` entries and
    /// `request_bytes_max` bytes, at most `queue_max` entries waiting.
    pub fn start(
        index: usize,
        proxy: Arc<Proxy>,
        bundle_max: usize,
        request_bytes_max: usize,
        queue_max: usize,
    ) -> std::io::Result<Shard> {
        let (jobs, jobs_rx) = bounded::<Job>(queue_max);
        let (flights, flights_rx) = bounded::<InFlight>(queue_max);
        thread::Builder::new()
            .name(format!("gw-batch-{index}"))
            .spawn(move || batch(&proxy, &jobs_rx, &flights, bundle_max, request_bytes_max))?;
        thread::Builder::new()
            .name(format!("gw-wait-{index}"))
            .spawn(move || wait(&flights_rx))?;
        Ok(Shard { jobs })
    }

    /// Submits `entry`, encoded in about `bytes` bytes; waits while the queue is full.
    pub fn submit(&self, entry: Entry, ordered: bool, bytes: usize) -> Arc<Completion> {
        let done = Arc::new(Completion::default());
        let job = Job {
            entry,
            ordered,
            bytes,
            done: done.clone(),
        };
        if let Err(e) = self.jobs.send(job) {
            e.0.done
                .complete(Err("the gateway is shutting down".to_owned()));
        }
        done
    }
}

/// The batcher: bundles queued entries of one kind and sends them.
fn batch(
    proxy: &Proxy,
    jobs: &Receiver<Job>,
    flights: &Sender<InFlight>,
    bundle_max: usize,
    request_bytes_max: usize,
) {
    let mut carry: Option<Job> = None;
    loop {
        let first = match carry.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let ordered = first.ordered;
        let mut bytes = BUNDLE_OVERHEAD + first.bytes;
        let mut group = vec![first];
        while group.len() < bundle_max {
            let Ok(job) = jobs.try_recv() else { break };
            if job.ordered != ordered || bytes + job.bytes > request_bytes_max {
                carry = Some(job);
                break;
            }
            bytes += job.bytes;
            group.push(job);
        }
        let mut entries = Vec::with_capacity(group.len());
        let mut dones = Vec::with_capacity(group.len());
        for job in group {
            entries.push(job.entry);
            dones.push(job.done);
        }
        let request = KvOp::Redis(Bundle { entries }).encode();
        let kind = if ordered {
            RequestKind::Ordered
        } else {
            RequestKind::Unordered
        };
        match proxy.invoke_async(request, kind) {
            Ok(future) => {
                if flights.send((future, dones)).is_err() {
                    return;
                }
            }
            Err(e) => {
                for done in dones {
                    done.complete(Err(e.to_string()));
                }
            }
        }
    }
}

/// The waiter: completes each bundle's entries with their replies, bundle by bundle.
fn wait(flights: &Receiver<InFlight>) {
    for (future, dones) in flights {
        let result = future.wait().map_err(|e| e.to_string()).and_then(|bytes| {
            KvReply::decode(&bytes).map_err(|e| format!("undecodable reply: {e}"))
        });
        match result {
            Ok(KvReply::Redis { replies }) if replies.len() == dones.len() => {
                for (done, reply) in dones.iter().zip(replies) {
                    done.complete(Ok(reply));
                }
            }
            Ok(KvReply::Error { message }) => {
                for done in &dones {
                    done.complete(Err(message.clone()));
                }
            }
            Ok(other) => {
                let why = format!("the cluster answered a Redis bundle with {other:?}");
                for done in &dones {
                    done.complete(Err(why.clone()));
                }
            }
            Err(why) => {
                for done in &dones {
                    done.complete(Err(why.clone()));
                }
            }
        }
    }
}
