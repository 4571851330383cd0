// bakeoff's own progressive enhancements: every page reads and works without them.
(function () {
  "use strict";
  // A multipart upload sends its CSRF token in the address (its body is not read before the
  // check); the page answering it must not keep the token in the address bar, history or a
  // bookmark: drop it from the shown URL.
  try {
    var url = new URL(window.location.href);
    if (url.searchParams.has("_csrf")) {
      url.searchParams.delete("_csrf");
      window.history.replaceState(window.history.state, "", url.pathname + (url.search || "") + url.hash);
    }
  } catch (e) {
    /* an old browser: the token stays in the address, as before */
  }
})();
