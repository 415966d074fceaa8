// The live part of a page (#content) is fetched again on each "changed" its stream sends
// (hx-trigger in base.html). A fetch that failed (the browser offline, the UI restarting)
// would leave the page behind until the next change: it is marked stale and fetched
// again as soon as the browser is online or the stream is open again.
(function () {
  var stale = false;
  function again() {
    var content = document.getElementById("content");
    if (stale && content) {
      stale = false;
      htmx.trigger(content, "refresh");
    }
  }
  document.addEventListener("htmx:sendError", function () { stale = true; });
  document.addEventListener("htmx:responseError", function () { stale = true; });
  document.addEventListener("htmx:sseOpen", again);
  window.addEventListener("online", function () { stale = true; again(); });
})();
