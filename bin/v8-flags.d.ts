export declare const SEMI_SPACE: string
export declare const v8FlagsFor: (args: ReadonlyArray<string>) => Array<string>
export declare const hasSemiSpaceFlag: (execArgv: ReadonlyArray<string>) => boolean
