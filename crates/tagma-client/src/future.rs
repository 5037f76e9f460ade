//! The asynchronous front end: the result slot an invocation completes and the
//! [`ReplyFuture`] a caller awaits (a `std::future::Future`, also waitable from plain threads).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};

use bytes::Bytes;

use crate::error::ClientError;
use crate::locking::lock;

#[derive(Default)]
pub(crate) struct SlotState {
    result: Option<Result<Bytes, ClientError>>,
    waker: Option<Waker>,
}

#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<SlotState>,
    ready: Condvar,
}

impl Slot {
    pub(crate) fn complete(&self, result: Result<Bytes, ClientError>) {
        let mut st = lock(&self.state);
        if st.result.is_none() {
            st.result = Some(result);
            if let Some(w) = st.waker.take() {
                w.wake();
            }
            self.ready.notify_all();
        }
    }
}

/// The pending result of an asynchronous invocation.
pub struct ReplyFuture {
    pub(crate) slot: Arc<Slot>,
}

impl ReplyFuture {
    /// Blocks until the reply quorum is reached or the invocation fails.
    pub fn wait(self) -> Result<Bytes, ClientError> {
        let mut st = lock(&self.slot.state);
        loop {
            if let Some(r) = st.result.take() {
                return r;
            }
            st = self.slot.ready.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Future for ReplyFuture {
    type Output = Result<Bytes, ClientError>;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut st = lock(&self.slot.state);
        match st.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
