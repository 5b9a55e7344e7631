// A chat's live events: its stream from a cursor, resumed after a drop (LiveStream), each
// event folded into the chat's data. The loaders an event asks for run in the background; one
// that fails (the gateway is restarting) runs again once the stream is live, so the page
// catches up instead of throwing.

import { LiveStream } from "./api.js";

export class ChatFeed {
  constructor(data, { onState, onEnded }) {
    this.data = data;
    this.onState = onState;
    this.onEnded = onEnded;
    this.missed = new Set();
    this.stream = null;
  }

  connect(after) {
    this.stream?.stop();
    this.stream = new LiveStream(`/chats/${this.data.id}/stream`, {
      after,
      onEvent: (frame) => {
        if (!this.data.closed) for (const load of this.data.apply(frame)) this.load(load);
      },
      onState: (state) => {
        this.onState(state);
        if (state === "live") for (const load of this.missed) this.load(load);
      },
      onRefused: (err) => this.refused(err),
    });
  }

  /** Run the data's loader `name` without waiting on it. */
  load(name) {
    this.missed.delete(name);
    this.data[name]().catch(() => {
      if (!this.data.closed) this.missed.add(name);
    });
  }

  async refused(err) {
    if (this.data.closed) return;
    if (err.status === 410 || err.status === 400) {
      // Events were pruned (or the cursor is unknown): reload, then stream from the last.
      await this.data.loadTranscript();
      this.data.restart();
      this.connect(err.detail.last_event_id ?? null);
    } else {
      this.onEnded(err);
    }
  }

  stop() {
    this.stream?.stop();
  }
}
