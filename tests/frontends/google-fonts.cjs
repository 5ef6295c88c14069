// Google Fonts, answered offline for `next build`, whose `next/font/google`
// fetches the CSS of the fonts a layout names and fails the build without
// the network: scripts/frontends points NEXT_FONT_GOOGLE_MOCKED_RESPONSES
// (Next.js's own switch for its tests, read by webpack and Turbopack
// builds alike) here. The key is the URL both front-ends' layouts ask for
// (`Inter({subsets: ["latin"], display: "swap"})`); a build asking for
// another fails naming it. The face has no file (so there is nothing to
// fetch): the browser uses the next font in the stack, as `next dev` does
// offline.
module.exports = {
  "https://fonts.googleapis.com/css2?family=Inter:wght@100..900&display=swap": `/* latin */
@font-face {
  font-family: 'Inter';
  font-style: normal;
  font-weight: 100 900;
  font-display: swap;
  unicode-range: U+0000-00FF;
}
`,
};
