// <hermetic-style>: where the vendored xterm.js writes the styles it computes (console/vendor.sh renames
// its <style> elements). The console's style-src 'self' blocks a <style> element's text; a constructed
// style sheet (CSSOM, from this origin's own script) is allowed, so the element's text is adopted as one.
class AdoptedStyle extends HTMLElement {
  connectedCallback() {
    this.sheet = new CSSStyleSheet();
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, this.sheet];
    this.watch = new MutationObserver(() => this.sheet.replaceSync(this.textContent));
    this.watch.observe(this, { childList: true, characterData: true, subtree: true });
    this.sheet.replaceSync(this.textContent);
  }

  disconnectedCallback() {
    this.watch.disconnect();
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((sheet) => sheet !== this.sheet);
  }
}

if (!customElements.get("hermetic-style")) customElements.define("hermetic-style", AdoptedStyle);
