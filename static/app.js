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

// "Copy" buttons (`data-copy` names the element whose text they copy): shown only where the
// script runs; the clipboard API where the browser allows it, else the text is selected for
// the reader's own copy.
(function () {
  "use strict";
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source) return;
    button.hidden = false;
    var label = button.textContent;
    function said(text) {
      button.textContent = text;
      button.setAttribute("data-copied", text === "Copied" ? "yes" : "selected");
      window.setTimeout(function () { button.textContent = label; }, 4000);
    }
    function selectIt() {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      said("Selected: press Ctrl+C");
    }
    button.addEventListener("click", function () {
      var text = source.textContent;
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { said("Copied"); }, selectIt);
      } else {
        selectIt();
      }
    });
  });
})();
