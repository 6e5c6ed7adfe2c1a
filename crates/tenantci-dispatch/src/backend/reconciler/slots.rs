//! The admission slots recovery starts lost executors in: the backend's consumer's, taken
//! before the worker pulls (a seam, [`Slots`], so the slot rule is unit-tested without NATS).

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::task::JoinSet;

use crate::queue::consumer::{CappedConsumer, Slot};

/// Where recovery takes its admission slots: the backend's [`CappedConsumer`], whose slots
/// the worker's pulls take too (a seam, so the slot rule is tested without NATS).
pub trait Slots: Send + Sync + 'static {
    /// A slot free now; None when every slot is taken.
    fn reserve(&self) -> Option<Slot>;

    /// Waits for a slot, in turn with the worker's pulls; None when the source is gone.
    fn acquire(&self) -> BoxFuture<'static, Option<Slot>>;
}

impl Slots for CappedConsumer {
    fn reserve(&self) -> Option<Slot> {
        self.reserve_slot()
    }

    fn acquire(&self) -> BoxFuture<'static, Option<Slot>> {
        Box::pin(self.acquire_slot())
    }
}

/// The slots of the executors recovery starts again. Taken before the worker pulls anything
/// (recovery runs first); when none is free, one is awaited in the background, in turn with
/// the worker's pulls, whose idle lanes hold every free slot while they wait, so a pass never
/// waits for one.
pub struct SpareSlots {
    consumer: Arc<dyn Slots>,
    spare: Vec<Slot>,
    /// The background wait for a slot; aborted when dropped.
    awaiting: JoinSet<Option<Slot>>,
}

impl SpareSlots {
    /// None spare yet; taken from `consumer`.
    pub fn new(consumer: Arc<dyn Slots>) -> Self {
        SpareSlots {
            consumer,
            spare: Vec::new(),
            awaiting: JoinSet::new(),
        }
    }

    /// A slot for an executor recovery found running (None beyond the capacity).
    pub fn for_found(&self) -> Option<Slot> {
        self.consumer.reserve()
    }

    /// Takes up to `n` slots that are free now.
    pub fn reserve(&mut self, n: usize) {
        self.release();
        while self.spare.len() < n {
            match self.consumer.reserve() {
                Some(slot) => self.spare.push(slot),
                None => break,
            }
        }
    }

    /// A spare slot, or None while one is awaited in the background.
    pub fn take(&mut self) -> Option<Slot> {
        while let Some(done) = self.awaiting.try_join_next() {
            self.spare.extend(done.ok().flatten());
        }
        if let Some(slot) = self.spare.pop() {
            return Some(slot);
        }
        if self.awaiting.is_empty() {
            self.awaiting.spawn(self.consumer.acquire());
        }
        None
    }

    /// A slot taken and not used (the start did not happen): kept for the next one.
    pub fn give_back(&mut self, slot: Slot) {
        self.spare.push(slot);
    }

    /// Nothing left to start again: the spare slots, and one awaited, go back to the worker.
    pub fn release(&mut self) {
        self.awaiting.abort_all();
        self.awaiting.detach_all();
        self.spare.clear();
    }
}
