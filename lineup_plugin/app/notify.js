// @ts-check
// System notifications for cards that arrive while the App is in the background. Permission is
// asked once, only when the user presses the bell after reading why (never on load).

const TITLES = {
  choice: "The agent asks you to choose",
  confirm: "The agent asks for your approval",
  input: "The agent needs some details",
};

/** The bell button `button` with its explanation `hint`: shown while permission is still to ask. */
export class Notifier {
  constructor(button, hint) {
    this.button = button;
    this.hint = hint;
    this.supported = typeof Notification !== "undefined";
    button.addEventListener("click", () => this.ask());
    this.refresh();
  }

  refresh() {
    const ask = this.supported && Notification.permission === "default";
    this.button.hidden = !ask;
    this.hint.hidden = !ask;
  }

  async ask() {
    if (!this.supported) return;
    try {
      await Notification.requestPermission();
    } finally {
      this.refresh();
    }
  }

  /** A card arrived: notify if the App is not visible and the user allowed it. */
  card(call) {
    if (!this.supported || document.visibilityState !== "hidden" || Notification.permission !== "granted") return;
    const args = call.arguments ?? {};
    const body = String(args.question ?? args.title ?? args.message ?? call.name ?? "").slice(0, 200);
    const notification = new Notification(TITLES[call.name] ?? `The agent calls ${call.name}`, {
      body,
      tag: call.call_id, // one notification per card, even when it is re-sent
      icon: "icon.svg",
    });
    notification.onclick = () => {
      window.focus();
      notification.close();
    };
  }
}
