// Starts Swagger UI on the service's own OpenAPI document. A file, not an inline script,
// so the page's Content-Security-Policy can allow scripts from this origin only.
"use strict";
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: new URL("openapi.json", document.baseURI).href,
    dom_id: "#swagger-ui",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    // No badge from validator.swagger.io: the page talks to this service only.
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
    layout: "BaseLayout",
  });
});
