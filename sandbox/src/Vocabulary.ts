/**
 * Word lists the generator draws from. Plausible for an advisory firm's CRM; no real people.
 */

// prettier-ignore
export const FIRST_NAMES = [
  "Avery", "Bianca", "Carlos", "Dana", "Elena", "Farid", "Grace", "Hiro", "Imani", "Jonas", "Keiko", "Liam", "Maya",
  "Nikhil", "Olivia", "Pavel", "Quinn", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wesley", "Ximena", "Yusuf", "Zoe",
  "Amara", "Benedict", "Chloe", "Diego", "Esther", "Felix", "Gemma", "Hector", "Ingrid", "Jamal", "Kara", "Lorenzo",
  "Mei", "Noah", "Opal", "Priya", "Rafael", "Sofia", "Tobias", "Ursula", "Victor", "Willa"
] as const

// prettier-ignore
export const LAST_NAMES = [
  "Abernathy", "Bergstrom", "Castillo", "Delacroix", "Eriksen", "Fitzgerald", "Guerrero", "Hollister", "Iwasaki",
  "Jablonski", "Kowalczyk", "Lindqvist", "Montgomery", "Nakamura", "Okafor", "Pemberton", "Quintero", "Rasmussen",
  "Sorensen", "Thibodeaux", "Underwood", "Valdivia", "Whitaker", "Xiong", "Yamamoto", "Zielinski", "Ashworth",
  "Brennan", "Chatterjee", "Dubois", "Ellsworth", "Falkner", "Gallagher", "Hargreaves", "Ibarra", "Jorgensen", "Kim",
  "Larkin", "Moreau", "Novak", "Oyelaran", "Patel", "Reyes", "Schneider", "Tanaka", "Vance", "Wolfe"
] as const

export const MIDDLE_NAMES = ["James", "Marie", "Lee", "Ann", "Robert", "Grace", "Alan", "Jo", "Ray", "Lynn"] as const
export const SALUTATIONS = ["Mr.", "Ms.", "Mrs.", "Dr.", "Mx."] as const
export const SUFFIXES = ["Jr.", "Sr.", "III", "PhD"] as const
export const GENDERS = ["female", "male", "nonbinary", "other", "prefer_not_to_say"] as const
export const DESIGNATIONS = ["CFP", "CPA", "JD", "MD", "CFA", "ChFC"] as const

export const EMAIL_DOMAINS = ["gmail.com", "outlook.com", "icloud.com", "yahoo.com", "proton.me", "fastmail.com"]
export const PHONE_TYPES = ["mobile", "home", "work", "fax"] as const

// prettier-ignore
export const STREETS = [
  "Maple Avenue", "Harbor Road", "Cedar Lane", "Summit Drive", "Willow Court", "Lakeshore Boulevard",
  "Ridgeview Terrace", "Orchard Street", "Granite Way", "Bayberry Circle", "Juniper Path", "Elm Street"
] as const

/** City, state, zip prefix. */
export const CITIES: ReadonlyArray<readonly [string, string, string]> = [
  ["Portland", "OR", "972"],
  ["Austin", "TX", "787"],
  ["Denver", "CO", "802"],
  ["Raleigh", "NC", "276"],
  ["Madison", "WI", "537"],
  ["Boise", "ID", "837"],
  ["Savannah", "GA", "314"],
  ["Burlington", "VT", "054"],
  ["Santa Fe", "NM", "875"],
  ["Ann Arbor", "MI", "481"],
  ["Charleston", "SC", "294"],
  ["Tacoma", "WA", "984"]
]

// prettier-ignore
export const BUSINESS_PREFIXES = [
  "Alder", "Bluewater", "Copperline", "Driftwood", "Evergreen", "Foxglove", "Golden Gate", "Highland", "Ironwood",
  "Juniper", "Keystone", "Lighthouse", "Meridian", "Northstar", "Oakridge", "Pinecrest", "Quarry", "Riverbend",
  "Silverleaf", "Timberline", "Upland", "Vantage", "Westwind", "Yellowstone", "Zephyr"
] as const
// prettier-ignore
export const BUSINESS_NOUNS = [
  "Dental", "Logistics", "Bakery", "Architecture", "Veterinary", "Construction", "Software", "Orthodontics",
  "Landscaping", "Brewing", "Consulting", "Physical Therapy", "Printing", "Realty", "Marine Supply", "Optometry"
] as const
export const BUSINESS_SUFFIXES = ["LLC", "Inc.", "Group", "Partners", "Co.", "Holdings", "PLLC", "Ltd."] as const
// prettier-ignore
export const INDUSTRIES = [
  "Healthcare", "Transportation", "Food & Beverage", "Professional Services", "Construction", "Technology",
  "Real Estate", "Manufacturing", "Retail", "Hospitality"
] as const

// prettier-ignore
export const COMPANY_NAMES = [
  "Northwind Wealth Partners", "Harbor Point Advisors", "Summit Ridge Financial", "Cascade Family Office",
  "Lanternlight Planning Group", "Birchwood Capital Advisors", "Meadowbrook Wealth", "Stonegate Financial Planning"
] as const

// prettier-ignore
export const BOOK_NAMES = [
  "Private Clients", "Retirement Planning", "Business Owners", "Young Professionals", "Legacy & Estate",
  "Institutional", "Medical Professionals", "Tech Founders"
] as const

export const TEAM_NAMES = ["Client Service Team", "Planning Team", "Operations Team"] as const

// prettier-ignore
export const TAG_NAMES = [
  "VIP", "Referral Source", "Estate Planning", "Retired", "Small Business", "Charitable Giving", "Tax Sensitive"
] as const

export const CARRIERS: ReadonlyArray<readonly [string, string, ReadonlyArray<readonly [string, string]>]> = [
  [
    "jackson_national",
    "Jackson National Life",
    [
      ["JNL-EA2", "Elite Access II"],
      ["JNL-PP", "Perspective II"]
    ]
  ],
  [
    "allianz_life",
    "Allianz Life",
    [
      ["ALZ-222", "Allianz 222"],
      ["ALZ-IDX", "Index Advantage"]
    ]
  ],
  [
    "nationwide",
    "Nationwide",
    [
      ["NW-MON", "Monument Advisor"],
      ["NW-DFA", "Destination Future"]
    ]
  ],
  [
    "pacific_life",
    "Pacific Life",
    [
      ["PL-PAS", "Pacific Advisory Select"],
      ["PL-ODY", "Pacific Odyssey"]
    ]
  ],
  [
    "lincoln_financial",
    "Lincoln Financial",
    [
      ["LFG-CHO", "ChoicePlus Assurance"],
      ["LFG-LVL", "Level Advantage"]
    ]
  ]
]
// prettier-ignore
export const CONTRACT_TYPES = [
  "variable_annuity", "fixed_indexed_annuity", "fixed_annuity", "registered_index_linked_annuity"
] as const
export const ANNUITY_STATUSES = ["active", "active", "active", "surrendered", "annuitized"] as const
export const TAX_STATUSES = ["qualified", "non_qualified"] as const
export const REGISTRATION_TYPES = ["individual", "joint", "ira", "roth_ira", "trust"] as const

// prettier-ignore
export const INSTITUTIONS = [
  "Charles Schwab", "Fidelity Investments", "Vanguard", "Pershing", "TD Ameritrade Institutional", "Altruist",
  "Interactive Brokers", "LPL Financial"
] as const
/** account_type, tax_advantaged_type, a display name. */
export const ACCOUNT_KINDS: ReadonlyArray<readonly [string, string, string]> = [
  ["brokerage", "none", "Individual Brokerage"],
  ["brokerage", "none", "Joint Brokerage"],
  ["ira", "traditional_ira", "Traditional IRA"],
  ["ira", "roth_ira", "Roth IRA"],
  ["retirement", "401k", "401(k)"],
  ["education", "529", "529 College Savings"],
  ["health", "hsa", "Health Savings Account"],
  ["trust", "none", "Family Trust"],
  ["annuity", "other", "Deferred Compensation"],
  ["checking", "none", "Cash Management"]
]
export const MODEL_PORTFOLIOS = ["Growth 80/20", "Balanced 60/40", "Income 30/70", "ESG Core", "Tax-Managed Equity"]

// prettier-ignore
export const MEETING_TITLES = [
  "Annual review", "Quarterly check-in", "Discovery meeting", "Retirement income planning",
  "Estate plan walkthrough", "Tax strategy session", "Onboarding kickoff", "Insurance review",
  "College funding discussion", "Portfolio rebalance"
] as const
export const MEETING_TYPES = ["client_review", "discovery", "planning", "internal", "onboarding"] as const
export const MEETING_SOURCES = ["instant", "calendar_event", "imported", "logged"] as const
// prettier-ignore
export const TRANSCRIPT_LINES = [
  "Thanks for making the time today, let's start with what has changed since we last met.",
  "We sold the rental property in March, so there is a capital gain to plan around.",
  "I'd like to revisit the allocation now that retirement is about three years out.",
  "Can we move the required minimum distribution to December this year?",
  "The beneficiary designations on the IRA still list my late father.",
  "Let's schedule a follow-up with your CPA before the extension deadline.",
  "We are expecting our second child in the fall, so the 529 matters more now.",
  "I'll send over the updated statements from the old 401(k) this week.",
  "That sounds reasonable; let's keep the cash reserve at six months of expenses.",
  "I'll prepare two scenarios and we can compare them at the next meeting."
] as const

// prettier-ignore
export const TASK_TITLES = [
  "Send follow-up email", "Prepare annual review packet", "Update beneficiary forms", "Process RMD request",
  "Schedule CPA call", "Rebalance portfolio", "Collect new account paperwork", "Review insurance coverage",
  "Confirm wire instructions", "File meeting notes", "Request updated statements", "Draft financial plan"
] as const
export const TASK_PRIORITIES = ["low_priority", "medium_priority", "high_priority"] as const

// prettier-ignore
export const NOTE_SENTENCES = [
  "Client called to confirm the transfer arrived.",
  "Discussed moving part of the cash position into the bond ladder.",
  "Spouse prefers email over phone for routine updates.", "Reminder: daughter starts college next September.",
  "Reviewed the trust documents; the attorney will send revisions.",
  "Client is considering a charitable remainder trust.", "Left a voicemail about the upcoming review meeting.",
  "Updated risk questionnaire: moderate growth."
] as const

export const CLIENT_STATUSES = ["active", "active", "active", "inactive"] as const
export const CLIENT_TIERS = ["platinum", "gold", "silver", null] as const
export const PROSPECT_STATUSES = ["new", "contacted", "qualified", "nurturing"] as const

export const CONTACT_CUSTOM_FIELDS = ["risk_tolerance", "referral_source", "preferred_contact_method"] as const
export const ACCOUNT_CUSTOM_FIELDS = ["custodian_code", "model_portfolio"] as const
export const RISK_TOLERANCES = ["conservative", "moderate", "growth", "aggressive"] as const
export const CONTACT_METHODS = ["email", "phone", "text"] as const

export const TEMPLATE_SPECS: ReadonlyArray<
  readonly [title: string, kind: "household" | "contact" | "business", description: string]
> = [
  ["New Client Onboarding", "household", "Everything from signed agreement to funded accounts."],
  ["Annual Review", "household", "Prepare, hold and follow up on the yearly review."],
  ["Account Opening", "contact", "Paperwork, signatures and funding for a new account."],
  ["Business Succession Plan", "business", "Buy-sell agreement, valuation and key-person coverage."],
  ["Retirement Transition", "contact", "From last paycheck to first distribution."],
  ["Estate Plan Update", "household", "Coordinate documents with the family's attorney."]
]
// prettier-ignore
export const MILESTONE_TITLES = [
  "Intake", "Gather documents", "Analysis", "Recommendation", "Implementation", "Follow-up"
] as const
export const MILESTONE_COLORS = ["#4F46E5", "#059669", "#D97706", "#DC2626", "#2563EB", "#7C3AED"] as const
export const FORM_FIELD_TYPES = ["text", "textarea", "date", "select", "checkbox", "currency"] as const
